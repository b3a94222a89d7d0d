#!/usr/bin/env bash
# Session 32, round 6. Library b6: round 5's b5 with the rare-row pass out of line (scalar
# arguments) and the plain-row test as one unsigned range check on q's bits (b5's preprocess:
# +2.6-3.9% against main's). Checks: the training GPU tests, gradient hashes against main's, the
# preprocess's time main / b5 / b6 alternating (twice).
#   OUT=$OUT bash benchmarks/results/session32/scripts/round6.sh
set -u
cd "$(dirname "$0")/../../../.."
cp .ab/r6/* .ab/
source notes/prepared/round_common.sh b6 b5 main
X=$(L b6)
chk training_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_preprocess.py tests/python/test_gpu_training.py -k "preprocess or extreme or accuracy or large_dout" 
for n in b6 main; do
  step grad_$n 200 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/grad_hashes.py
  cp "$LOGS/grad_$n.log" "$LOGS/grad_$n.txt"
done
if cmp -s "$LOGS/grad_b6.txt" "$LOGS/grad_main.txt"; then
  echo "== grad hashes b6 = main: same" >> "$OUT/summary.txt"
else
  echo "== grad hashes b6 = main: DIFFER" >> "$OUT/summary.txt"; fail=1
fi
for n in main b5 b6 main b5 b6; do
  step prep_$n 120 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 -m benchmarks.preprocess
  tail -4 "$LOGS/prep_$n.log" | head -1 >> "$OUT/summary.txt"
done
echo "== round 6 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep -v "^\.\.\." "$OUT/summary.txt" | tail -50
