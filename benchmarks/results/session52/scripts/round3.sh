#!/usr/bin/env bash
# Session 52's third call: split2's PAIR form (branch wip/pair; FOLD_DECODE_SPLIT2_PAIR=1, forced
# only), library s52pair (notes/prepared/build_ab.sh s52pair on the branch), run from the branch's
# tree (its tests), carrying .ab/s52pair.so.xz and .ab/s52pair.commit:
#   OUT=$OUT bash benchmarks/results/session52/scripts/round3.sh
# 1. bit tests (PAIR against the default, split2 against split_item with PAIR); 2. split2's own
# B1 times (OVERLAP 0) and graphed attends, PAIR 1 against the default (PIPE), alternating;
# 3. memcheck and racecheck of the decode smoke with PAIR forced.
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s52pair
P=$(L s52pair)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/summary.txt"
chk bits 200 env FOLD_ATTENTION_LIBRARY=$P python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py -k "split2_pair or split2_same_bits"
S="1,512,9,3,64;1,2048,9,3,64;1,8192,9,3,64;1,4096,32,8,128;1,16384,32,8,128;4,4096,32,8,128"
for r in 1 2; do
  for a in 1 0; do
    step kt_own_pair${a}_r$r 60 env FOLD_ATTENTION_LIBRARY=$P FOLD_DECODE_OVERLAP=0 \
      FOLD_DECODE_SPLIT2_PAIR=$a python3 scripts/decode_kernel_times.py --screened-only --shapes "$S"
    step kt_pair${a}_r$r 60 env FOLD_ATTENTION_LIBRARY=$P FOLD_DECODE_SPLIT2_PAIR=$a \
      python3 scripts/decode_kernel_times.py --screened-only --shapes "$S"
  done
done
chk memcheck 90 env FOLD_ATTENTION_LIBRARY=$P FOLD_DECODE_SPLIT2_PAIR=1 compute-sanitizer \
  --tool memcheck --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
chk racecheck 150 env FOLD_ATTENTION_LIBRARY=$P FOLD_DECODE_SPLIT2_PAIR=1 compute-sanitizer \
  --tool racecheck --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed|ERROR SUMMARY|RACECHECK SUMMARY" "$LOGS"/bits.log "$LOGS"/memcheck.log "$LOGS"/racecheck.log
for f in "$LOGS"/kt_*.log; do echo "-- $(basename $f)"; grep -E "graphed|split2" $f; done
exit $fail
