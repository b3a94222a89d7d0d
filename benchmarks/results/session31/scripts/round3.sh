#!/usr/bin/env bash
# Session 31, round 3 (carry .ab/r3: library pk1 = branch p1-knobs, main + two experimental
# knobs of pass 1: FOLD_DECODE_P1_HOIST=1 loads the flagged-group count before the statistics,
# FOLD_DECODE_P1_BLOCKS=N caps its grid). Does pass 1's cost at B1 come from its grid's size or
# from its chain of loads?
#   OUT=$OUT bash benchmarks/results/session31/scripts/round3.sh
set -u
cd "$(dirname "$0")/../../../.."
cp .ab/r3/* .ab/
source notes/prepared/round_common.sh pk1
X=$(L pk1)
chk guard_tests 120 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_P1_HOIST=1 FOLD_DECODE_P1_BLOCKS=8 \
  python3 -m pytest -q -m gpu -p no:logging tests/python/test_gpu_decode.py -k "guard or all_requests or graph"
SHP="1,32768,32,8,128;1,2048,9,3,64;1,8192,9,3,64;8,16384,32,8,128"
for o in "-,1" "1,-"; do
  n=ab_hoist_${o/,/_}
  step $n 120 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env \
    FOLD_DECODE_P1_HOIST --values "$o" --rounds 7 --shapes "$SHP"
  cat "$LOGS/$n.log" >> "$OUT/ab_p1.txt"
done
step ab_blocks 150 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env \
  FOLD_DECODE_P1_BLOCKS --values "-,1,8,32,132" --rounds 7 --shapes "$SHP"
cat "$LOGS/ab_blocks.log" >> "$OUT/ab_p1.txt"
echo "== round 3 checks failed: $fail" >> "$OUT/summary.txt"
grep -v "^\.\.\." "$OUT/summary.txt" | tail -20; cat "$OUT/ab_p1.txt"
