#!/usr/bin/env bash
# Session 32, round 2. Library bn = branch 8d041e7: round 1's gx (the guard's exact second pass,
# the grid's s clamped at 126) + the backward bound max ||dO_i|| computed scaled (was
# max ||dO_i||^2, which overflowed for dO ~ 1e19: NaN gradients). Checks: the training GPU tests
# (the new bf16 extreme-scale test; the preprocess's bounds bit for bit against the CPU
# reference), gradient hashes against main's (ordinary inputs: the same bits), the preprocess's
# time (bn against main), synccheck of the training smoke (printed, not counted); then session
# 31's prepared front profile with main's library (ncu source counters, tarred: 8 files come back).
#   OUT=$OUT bash benchmarks/results/session32/scripts/round2.sh
set -u
cd "$(dirname "$0")/../../../.."
cp .ab/r2/* .ab/
source notes/prepared/round_common.sh bn main
X=$(L bn)
chk training_tests 300 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py tests/python/test_gpu_preprocess.py tests/python/test_gpu_kv_bounds.py
for n in bn main; do
  step grad_$n 200 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/grad_hashes.py
  cp "$LOGS/grad_$n.log" "$LOGS/grad_$n.txt"
done
if cmp -s "$LOGS/grad_bn.txt" "$LOGS/grad_main.txt"; then
  echo "== grad hashes bn = main: same" >> "$OUT/summary.txt"
else
  echo "== grad hashes bn = main: DIFFER" >> "$OUT/summary.txt"; fail=1
fi
for n in main bn main bn; do
  step prep_$n 120 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 -m benchmarks.preprocess
done
step synccheck_training 200 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool synccheck \
  --print-limit 4 python3 scripts/gpu_smoke.py --training-only
echo "== round 2 training checks failed: $fail" >> "$OUT/summary.txt"
mkdir -p "$OUT/front"
OUT=$OUT/front bash benchmarks/results/session31/scripts/next_round_front_profile.sh > "$LOGS/front.txt" 2>&1
tar czf "$OUT/front.tgz" -C "$OUT" front && rm -rf "$OUT/front"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep -v "^\.\.\." "$OUT/summary.txt" | tail -60
