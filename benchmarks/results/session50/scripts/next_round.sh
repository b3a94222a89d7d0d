#!/usr/bin/env bash
# The L2 prefetch's device call (prepared in session 50, whose device starts failed before it ran).
# First `bash benchmarks/results/session50/scripts/prepare.sh` here, then on the device, carrying
# .ab/s50p.* (main + patches/l2pf-prepared.patch: a small grid's dense ring and split2 ask L2 for
# their split's rows at its start; and the patch's test_gpu_decode.py, put in place of main's):
#   OUT=$OUT bash benchmarks/results/session50/scripts/next_round.sh
# About 7 minutes. If the tests pass: `git am` the patch (and update notes/decode.md's section 59,
# the README's decode row and the kernel times with what it measured).
# 1. the new bit test (FOLD_DECODE_L2PF 0 / 1) and the overlap bit test; 2. the whole GPU suite on
# s50p (its default prefetches in every small-grid test); 3. memcheck of the decode smoke with the
# prefetch forced on; 4. per-kernel times and graphed attends at B1 (and two larger grids), L2PF
# 0 / 1 alternating on s50p (round 1 has main's B1 times, on an H100).
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s50p
P=$(L s50p)
cp .ab/s50p.test_gpu_decode.py tests/python/test_gpu_decode.py  # (this copy of the tree only)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/summary.txt"
chk bits 150 env FOLD_ATTENTION_LIBRARY=$P python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py -k "l2_prefetch or overlap"
S="1,512,9,3,64;1,2048,9,3,64;1,8192,9,3,64;1,4096,32,8,128;1,16384,32,8,128;4,4096,32,8,128"
kt() {  # kt PF RUN
  step "kt_pf${1}_$2" 90 env FOLD_ATTENTION_LIBRARY=$P FOLD_DECODE_L2PF=$1 \
    python3 scripts/decode_kernel_times.py --shapes "$S"
}
# In order of need (the device time may end the call early; the logs come back after every step).
kt 0 1
kt 1 1
chk gpu_decode 200 env FOLD_ATTENTION_LIBRARY=$P python3 -m pytest -q -m gpu -p no:logging -x \
  tests/python/test_gpu_decode*.py tests/python/test_gpu_sinks.py
chk memcheck 150 env FOLD_ATTENTION_LIBRARY=$P FOLD_DECODE_L2PF=1 compute-sanitizer --tool memcheck \
  --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
kt 0 2
kt 1 2
chk gpu_all 330 env FOLD_ATTENTION_LIBRARY=$P python3 -m pytest -q -m gpu -p no:logging tests/python
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed|ERROR SUMMARY" "$LOGS"/bits.log "$LOGS"/gpu_decode.log "$LOGS"/gpu_all.log "$LOGS"/memcheck.log | tail -4
for f in "$LOGS"/kt_*.log; do echo "-- $(basename $f)"; grep -E "graphed|split2|ring" $f; done
exit $fail
