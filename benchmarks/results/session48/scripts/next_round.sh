#!/usr/bin/env bash
# Prepared for the next session (carry .ab/s48s.* and .ab/s48v.*). s48s: main's device code at the
# end of session 48 (if .ab is gone, build main and xz the library as .ab/s48s.so.xz with its
# commit file). The window tests' last two functions were changed after session 48's last device
# call (the cache's workspace filled with NaN before every arm; each arm checks with
# torch.profiler that it launched the kernel it means): they have not run on a GPU; then the
# whole GPU suite, as the check that main is green on the device (it also covers 5be5193, the C
# device checks in one pass per call, made after the last device call). s48v: branch wip/v8-window
# (`session48/patches/v8-window-ring-split2-prepared.patch` on main 3365ec7): windowed v8 steps
# on the dense ring and split2 too; the window / sinks / pinned / chunk GPU files on it, then
# windowed v8 steps timed against the plain split (FOLD_DECODE_RING=0 / FOLD_DECODE_SPLIT2=0
# arms; the screened v8 steps read densely unless FOLD_DECODE_SCREEN=1). If it passes: merge the
# branch (the test expectations change with it).
#   OUT=$OUT bash benchmarks/results/session48/scripts/next_round.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s48s s48v
S=$(L s48s) V=$(L s48v)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/summary.txt"
chk win_new 150 env FOLD_ATTENTION_LIBRARY=$S python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode_window_sinks.py -k "ring_schedules or split2_same_bits"
chk gpu_all 330 env FOLD_ATTENTION_LIBRARY=$S python3 -m pytest -q -m gpu -p no:logging tests/python
# (The branch's test file, kept beside the patch: the v8 windowed steps' expectations change with
# the kernels.)
cp benchmarks/results/session48/patches/v8-window-test_gpu_decode_window_sinks.py.txt \
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
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed" "$LOGS"/win_new.log "$LOGS"/gpu_all.log "$LOGS"/v8_win.log | tail -3
for f in "$LOGS"/tw_*.log; do echo "-- $(basename $f)"; grep -v "Warn\|warn" $f; done
