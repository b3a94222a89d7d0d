#!/usr/bin/env bash
# Session 32, round 5. Library b5: round 4's b4 with the rare rows' flag carried by the block's
# existing barrier (b4 added a __syncthreads_or per block; its preprocess was 4.5-6% slower than
# main's). Checks: the training GPU tests (the rare-row preprocess test), gradient hashes against
# main's, the preprocess's time b5 / main alternating.
#   OUT=$OUT bash benchmarks/results/session32/scripts/round5.sh
set -u
cd "$(dirname "$0")/../../../.."
cp .ab/r5/* .ab/
source notes/prepared/round_common.sh b5 main
X=$(L b5)
chk training_tests 300 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py tests/python/test_gpu_preprocess.py tests/python/test_gpu_kv_bounds.py
for n in b5 main; do
  step grad_$n 200 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/grad_hashes.py
  cp "$LOGS/grad_$n.log" "$LOGS/grad_$n.txt"
done
if cmp -s "$LOGS/grad_b5.txt" "$LOGS/grad_main.txt"; then
  echo "== grad hashes b5 = main: same" >> "$OUT/summary.txt"
else
  echo "== grad hashes b5 = main: DIFFER" >> "$OUT/summary.txt"; fail=1
fi
for n in main b5 main b5; do
  step prep_$n 120 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 -m benchmarks.preprocess
  tail -4 "$LOGS/prep_$n.log" | head -1 >> "$OUT/summary.txt"
done
echo "== round 5 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep -v "^\.\.\." "$OUT/summary.txt" | tail -40
