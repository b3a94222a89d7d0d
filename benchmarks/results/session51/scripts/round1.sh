#!/usr/bin/env bash
# Session 51's decode call: session 50's L2 prefetch (FOLD_DECODE_L2PF) and split2's step
# pipelining (FOLD_DECODE_SPLIT2_PIPE), both prepared and not yet run, in one library: s51p
# (branch wip/pipe: main + patches/l2pf-pipe-prepared.patch, three commits), beside s50m (main) for
# the large grids, whose split2 code was restructured (the same arithmetic; ptxas: a few registers
# more or fewer, no spill). First `bash benchmarks/results/session51/scripts/prepare.sh` here, then
# on the device, carrying .ab/s51p.*, .ab/s50m.so.xz and .ab/s50m.commit:
#   OUT=$OUT bash benchmarks/results/session51/scripts/round1.sh
# Steps in order of need (the logs come back after each, unless the machine is taken back): 1. the
# bit tests of both (on / off bit for bit) and split2's against split_item; 2. B1 per-kernel times
# and graphed attends in the four arms L2PF x PIPE, and own times (OVERLAP 0) of the arms 00 / 11;
# 3. large grids, s50m against s51p (depth 16, split2 without PIPE or L2PF there); 4. the decode GPU
# files; 5. memcheck with both forced on, racecheck with PIPE forced on; 6. steps 2-3 again, the
# arms in reverse order; 7. the whole suite.
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s51p s50m
P=$(L s51p)
cp .ab/s51p.test_gpu_decode.py tests/python/test_gpu_decode.py  # (this copy of the tree only)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/summary.txt"
chk bits 240 env FOLD_ATTENTION_LIBRARY=$P python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py -k "l2_prefetch or split2_pipe or split2_same_bits or split2_occupancy or overlap"
S="1,512,9,3,64;1,2048,9,3,64;1,8192,9,3,64;1,4096,32,8,128;1,16384,32,8,128;4,4096,32,8,128"
kt() {  # kt L2PF PIPE NAME [ENV...]
  local a=$1 b=$2 n=$3; shift 3
  step "kt_${a}${b}_$n" 90 env FOLD_ATTENTION_LIBRARY=$P FOLD_DECODE_L2PF=$a FOLD_DECODE_SPLIT2_PIPE=$b \
    "$@" python3 scripts/decode_kernel_times.py --shapes "$S"
}
BIG="32,8192,9,3,64;128,4096,9,3,64;32,8192,32,8,128;16,16384,32,4,128"
big() {  # big RUN
  for lib in s50m s51p; do
    step "big_${lib}_r$1" 90 env FOLD_ATTENTION_LIBRARY=$(L $lib) $KT "$BIG"  # (KT: round_common.sh)
  done
}
for ab in 00 10 01 11; do kt ${ab:0:1} ${ab:1:1} r1; done
kt 0 0 own FOLD_DECODE_OVERLAP=0
kt 1 1 own FOLD_DECODE_OVERLAP=0
big 1
chk gpu_decode 220 env FOLD_ATTENTION_LIBRARY=$P python3 -m pytest -q -m gpu -p no:logging -x \
  tests/python/test_gpu_decode*.py tests/python/test_gpu_sinks.py
chk memcheck 150 env FOLD_ATTENTION_LIBRARY=$P FOLD_DECODE_L2PF=1 FOLD_DECODE_SPLIT2_PIPE=1 \
  compute-sanitizer --tool memcheck --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
chk racecheck 150 env FOLD_ATTENTION_LIBRARY=$P FOLD_DECODE_SPLIT2_PIPE=1 compute-sanitizer --tool racecheck \
  --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
for ab in 11 01 10 00; do kt ${ab:0:1} ${ab:1:1} r2; done
big 2
chk gpu_all 330 env FOLD_ATTENTION_LIBRARY=$P python3 -m pytest -q -m gpu -p no:logging tests/python
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed|ERROR SUMMARY" "$LOGS"/bits.log "$LOGS"/gpu_decode.log "$LOGS"/gpu_all.log "$LOGS"/memcheck.log "$LOGS"/racecheck.log 2>/dev/null
for f in $(ls "$LOGS"/kt_*.log "$LOGS"/big_*.log 2>/dev/null); do echo "-- $(basename $f)"; grep -E "graphed|split2|ring" $f; done
exit $fail
