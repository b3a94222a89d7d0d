#!/usr/bin/env bash
# Session 31, round 4 (carry .ab/r4: library cdp1 = branch cdp-p1, decode.cu built with -rdc and
# device-linked by hand: the pass-0 combine's last block adds the step's statistics and
# tail-launches pass 1 only when the guard flagged a group; FOLD_DECODE_CDP=0: the two launches).
#   OUT=$OUT bash benchmarks/results/session31/scripts/round4.sh
set -u
cd "$(dirname "$0")/../../../.."
cp .ab/r4/* .ab/
source notes/prepared/round_common.sh cdp1
X=$(L cdp1)
chk decode_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python -k "decode or cache or guard"
for v in 0 1; do
  step guard_worst_b8_c$v 120 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_CDP=$v python3 \
    scripts/decode_guard_worst.py 8 32768 32 8 128
  step guard_worst_b2_c$v 120 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_CDP=$v python3 \
    scripts/decode_guard_worst.py 2 32768 32 8 128
  step hash_c$v 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_CDP=$v python3 \
    scripts/decode_hashes.py --depths none,16
  cp "$LOGS/hash_c$v.log" "$OUT/hash_c$v.txt"
done
if cmp -s <(grep -v "^==" "$OUT/hash_c0.txt") <(grep -v "^==" "$OUT/hash_c1.txt"); then
  echo "== hashes cdp 0 = 1: same" >> "$OUT/summary.txt"
else
  echo "== hashes cdp 0 = 1: DIFFER" >> "$OUT/summary.txt"; fail=1
fi
for tool in racecheck memcheck synccheck; do
  chk $tool 120 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool $tool --error-exitcode 1 \
    python3 scripts/gpu_smoke.py --decode-only
done
SHP="1,32768,32,8,128;1,2048,9,3,64;1,8192,9,3,64;8,16384,32,8,128;32,8192,32,8,128;128,4096,32,8,128"
for o in "0,-" "-,0"; do
  n=ab_c_${o/,/_}
  step $n 200 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env \
    FOLD_DECODE_CDP --values "$o" --rounds 7 --shapes "$SHP"
  cat "$LOGS/$n.log" >> "$OUT/ab_cdp.txt"
done
echo "== round 4 checks failed: $fail" >> "$OUT/summary.txt"
grep -v "^\.\.\." "$OUT/summary.txt" | tail -60; cat "$OUT/ab_cdp.txt"
