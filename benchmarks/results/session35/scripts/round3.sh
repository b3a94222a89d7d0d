#!/usr/bin/env bash
# Session 35, round 3: library m36 = round 2's m35 with the front's rule changed: HALF only where
# the 256-thread grid exceeds four blocks per SM, and U2 (UNROLL's tile loads together, without
# SMALL, at two blocks per SM) where it is at most two. Decode GPU tests (the forms' bit test),
# hashes against round 8's g2 and, at B135 (--repeat 15), every form forced against both off,
# racecheck / memcheck of the decode smoke (its B72 cases: U2 by the rule, then HALF forced),
# then graphed A/B of each form against off where the rule picks it, and kernel times.
#   OUT=$OUT bash benchmarks/results/session35/scripts/round3.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh m36
X=$(L m36)
chk decode_tests 150 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging -x \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_gpu_decode_pages.py
step hash_m36 60 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_hashes.py --depths none,16
cp benchmarks/results/session34/round8/logs/hash_g2.log "$LOGS/hash_g2.log"
same_logs hash_m36 hash_g2 "decode hashes m36 = g2 (round 8)"
H="python3 scripts/decode_hashes.py --depths none,16 --quick --repeat 15"
step hB_rule 90 env FOLD_ATTENTION_LIBRARY=$X $H
step hB_off 90 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_FRONT_HALF=0 FOLD_DECODE_FRONT_U2=0 $H
step hB_u2 90 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_FRONT_HALF=0 FOLD_DECODE_FRONT_U2=1 $H
step hB_half 90 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_FRONT_HALF=1 FOLD_DECODE_FRONT_U2=0 $H
same_logs hB_rule hB_off "decode hashes B135 rule = off"
same_logs hB_u2 hB_off "decode hashes B135 U2 = off"
same_logs hB_half hB_off "decode hashes B135 HALF = off"
for tool in racecheck memcheck; do
  chk $tool 120 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool $tool --error-exitcode 1 \
    python3 scripts/gpu_smoke.py --decode-only
done
step ab_u2 200 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env FOLD_DECODE_FRONT_U2 \
  --values -,0 --rounds 9 --shapes "32,8192,32,8,128;32,16384,32,8,64;64,8192,9,3,64;40,8192,32,8,128"
step ab_half 200 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env FOLD_DECODE_FRONT_HALF \
  --values -,0 --rounds 9 --shapes "128,4096,32,8,128;96,4096,32,8,128;256,2048,9,3,64"
for v in - 0; do
  step kt_u2$v 60 env FOLD_ATTENTION_LIBRARY=$X $([ $v = 0 ] && echo FOLD_DECODE_FRONT_U2=0) \
    python3 scripts/decode_kernel_times.py --screened-only --shapes "32,8192,32,8,128;64,8192,9,3,64"
done
echo "== round 3 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -h "us (" "$LOGS"/ab_*.log
for f in "$LOGS"/kt*; do echo "## $(basename $f)"; grep -E "graphed|front" "$f"; done
