#!/usr/bin/env bash
# Session 53's first device call: session 52's prepared call (session52/scripts/next_round.sh) made
# to fit one 10-minute call. Its separate decode-files step is dropped (the whole suite runs the
# same files with the patch's test_gpu_decode.py) and the steps run in order of what the merge
# needs: large grids against main, B1 times, the whole suite, racecheck, synccheck, then split2's
# own time by step count. Libraries: s52pd (main + session52/patches/pair-prepared.patch, built at
# b98ea93) and s52m (main at a70b65c; main's device code differs from it by one comment). Here
# first `bash benchmarks/results/session52/scripts/prepare.sh`; on the device, carrying
# .ab/s52pd.so.xz, .ab/s52pd.commit, .ab/s52pd.test_gpu_decode.py, .ab/s52m.so.xz, .ab/s52m.commit:
#   OUT=$OUT bash benchmarks/results/session53/scripts/round1.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s52pd s52m
cp .ab/s52pd.test_gpu_decode.py tests/python/test_gpu_decode.py  # (this copy of the tree only)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/summary.txt"
BIG="32,8192,9,3,64;128,4096,9,3,64;32,8192,32,8,128;16,16384,32,4,128"
for r in 1 2; do
  for lib in s52m s52pd; do
    step big_${lib}_r$r 40 env FOLD_ATTENTION_LIBRARY=$(L $lib) $KT "$BIG"
  done
done
S="1,512,9,3,64;1,2048,9,3,64;1,8192,9,3,64;1,4096,32,8,128;1,16384,32,8,128;4,4096,32,8,128"
for lib in s52m s52pd; do
  step kt_$lib 60 env FOLD_ATTENTION_LIBRARY=$(L $lib) python3 scripts/decode_kernel_times.py --shapes "$S"
done
chk gpu_all 300 env FOLD_ATTENTION_LIBRARY=$(L s52pd) python3 -m pytest -q -m gpu -p no:logging tests/python
# PAIR is the default on the smoke's small grids: racecheck and synccheck (the review's request).
for tool in racecheck synccheck; do
  chk $tool 120 env FOLD_ATTENTION_LIBRARY=$(L s52pd) compute-sanitizer --tool $tool --error-exitcode 1 \
    python3 scripts/gpu_smoke.py --decode-only
done
# split2's own time (OVERLAP 0) by step count (B1 H 9/3 D 64, L 128-512: one to four steps) in
# each form: PIPE, PAIR.
L4="1,128,9,3,64;1,256,9,3,64;1,384,9,3,64;1,512,9,3,64"
for form in "1 0" "0 1"; do
  set -- $form
  step own_pipe$1_pair$2 30 env FOLD_ATTENTION_LIBRARY=$(L s52pd) FOLD_DECODE_OVERLAP=0 \
    FOLD_DECODE_SPLIT2_PIPE=$1 FOLD_DECODE_SPLIT2_PAIR=$2 python3 scripts/decode_kernel_times.py \
    --screened-only --shapes "$L4"
done
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed|SUMMARY" "$LOGS"/racecheck.log "$LOGS"/synccheck.log "$LOGS"/gpu_all.log 2>/dev/null
for f in "$LOGS"/big_*.log "$LOGS"/kt_*.log "$LOGS"/own_*.log; do echo "-- $(basename $f)"; grep -E "graphed|split2" $f; done
exit $fail
