#!/usr/bin/env bash
# Session 32, round 4. Library b4 = branch da67bf4: the guard's exact second pass, the grid's s
# clamped at 126, the backward bound ||dO_i|| (scaled only for rows that need it, redone after
# the block's loop: round 3's per-pass vote cost 4.5-6% of the preprocess). Checks: every GPU
# test (decode and training; the new rare-row preprocess test), gradient hashes against main's,
# the preprocess's time b4 / main alternating.
#   OUT=$OUT bash benchmarks/results/session32/scripts/round4.sh
set -u
cd "$(dirname "$0")/../../../.."
cp .ab/r4/* .ab/
source notes/prepared/round_common.sh b4 main
X=$(L b4)
chk gpu_tests 400 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging tests/python
for n in b4 main; do
  step grad_$n 200 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/grad_hashes.py
  cp "$LOGS/grad_$n.log" "$LOGS/grad_$n.txt"
done
if cmp -s "$LOGS/grad_b4.txt" "$LOGS/grad_main.txt"; then
  echo "== grad hashes b4 = main: same" >> "$OUT/summary.txt"
else
  echo "== grad hashes b4 = main: DIFFER" >> "$OUT/summary.txt"; fail=1
fi
for n in main b4 main b4; do
  step prep_$n 120 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 -m benchmarks.preprocess
  tail -4 "$LOGS/prep_$n.log" | head -1 >> "$OUT/summary.txt"
done
echo "== round 4 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep -v "^\.\.\." "$OUT/summary.txt" | tail -40
