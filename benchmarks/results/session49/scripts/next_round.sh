#!/usr/bin/env bash
# Prepared in session 49 (no device was lent). First `bash benchmarks/results/session49/scripts/
# prepare.sh` here, then on the device, carrying .ab/s49m.* and .ab/s49v.* (about 25 MB):
#   OUT=$OUT bash benchmarks/results/session49/scripts/next_round.sh
# (about 7 minutes; the steps' limits add up to more). s49m: main's device code at the end of session 49, whose kernels' SASS is
# session 48's (scripts/sass_digest.py: the file splits and the backward's shared pair header
# changed no instruction). It runs:
# 1. the two window tests changed after session 48's last device call (the workspace filled with
#    NaN before every arm, a profiler check of the kernel each arm launches): never run yet;
# 2. the whole GPU suite on s49m (main green on the device; it also covers 5be5193, the C device
#    checks in one pass per call, host code made after session 48's last device call);
# 3. s49v (main + patches/v8-window-ring-split2-prepared.patch): the window / sinks / pinned /
#    chunk GPU files with the branch's test file (the v8 windowed expectations change with it),
#    then windowed v8 steps timed, FOLD_DECODE_RING=0 / 1 alternating. If they pass: `git am` the
#    patch on main.
# 4. Section 57's open question for split2 (depth 16) at B1, before any sub-split work on it:
#    its own time (FOLD_DECODE_OVERLAP=0, so its duration does not include the wait for the
#    front) at one split per group with 2 / 8 / 8 chunks a block (L 128 / 512) and at 4 / 16
#    splits (L 2K / 8K), H 9/3 D 64 (the captures' heads), and the dense ring beside it. If
#    L 128 and L 512 take about the same, the chain of chunks is not what B1 pays there either.
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s49m s49v
M=$(L s49m) V=$(L s49v)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/summary.txt"
chk win_new 150 env FOLD_ATTENTION_LIBRARY=$M python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode_window_sinks.py -k "ring_schedules or split2_same_bits"
chk gpu_all 330 env FOLD_ATTENTION_LIBRARY=$M python3 -m pytest -q -m gpu -p no:logging tests/python
cp benchmarks/results/session49/patches/v8-window-test_gpu_decode_window_sinks.py.txt \
  tests/python/test_gpu_v8win_tmp.py
chk v8_win 200 env FOLD_ATTENTION_LIBRARY=$V python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_v8win_tmp.py tests/python/test_gpu_decode_pinned_window.py \
  tests/python/test_gpu_decode_chunk_after_history.py tests/python/test_gpu_sinks.py
rm -f tests/python/test_gpu_v8win_tmp.py
export FOLD_DECODE_WINDOW_CASES="1,32768,32,8,128,4096;32,8192,32,8,128,4096;64,8192,16,8,128,1024;32,8192,9,3,64,4096"
i=0
for ring in 0 1 0 1; do
  i=$((i + 1))
  step "tw_v8_${i}_ring$ring" 60 env FOLD_ATTENTION_LIBRARY=$V FOLD_DECODE_RING=$ring \
    python3 scripts/time_decode_window.py --v8
done
for ov in 0 1; do
  step "kt_b1_ov$ov" 120 env FOLD_ATTENTION_LIBRARY=$M FOLD_DECODE_OVERLAP=$ov \
    python3 scripts/decode_kernel_times.py --shapes "1,128,9,3,64;1,512,9,3,64;1,2048,9,3,64;1,8192,9,3,64"
done
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed" "$LOGS"/win_new.log "$LOGS"/gpu_all.log "$LOGS"/v8_win.log | tail -3
for f in "$LOGS"/tw_*.log "$LOGS"/kt_*.log; do echo "-- $(basename $f)"; grep -v "Warn\|warn" $f; done
exit $fail
