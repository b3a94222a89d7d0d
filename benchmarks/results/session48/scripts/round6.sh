#!/usr/bin/env bash
# Session 48, sixth device call, from branch wip/ring-window (carry .ab/s48w.*). s48w = main
# 206ff3b's device code + the dense ring's WIN instances: windowed dense steps with bf16 / fp16 V
# run the ring instead of the plain split (session 42 on an H100: W4096 at B32 L8K D 128 took
# 262 us against SDPA's 191 over the window). The whole GPU suite, memcheck / racecheck of the
# smoke (its windowed loop includes a dense fp16 D 64 G 8 cache), then the windowed steps' times
# with the ring (default) and with the plain split (FOLD_DECODE_RING=0), alternating processes.
#   OUT=$OUT bash benchmarks/results/session48/scripts/round6.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s48w
W=$(L s48w)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/summary.txt"
chk win_tests 200 env FOLD_ATTENTION_LIBRARY=$W python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode_window_sinks.py tests/python/test_gpu_decode_pinned_window.py
chk gpu_all 330 env FOLD_ATTENTION_LIBRARY=$W python3 -m pytest -q -m gpu -p no:logging tests/python
chk memcheck 150 env FOLD_ATTENTION_LIBRARY=$W compute-sanitizer --tool memcheck --error-exitcode 1 \
  python3 scripts/gpu_smoke.py --decode-only
chk racecheck 150 env FOLD_ATTENTION_LIBRARY=$W compute-sanitizer --tool racecheck --error-exitcode 1 \
  python3 scripts/gpu_smoke.py --decode-only
export FOLD_DECODE_WINDOW_CASES="1,8192,64,8,64,128;32,8192,64,8,64,128;1,32768,32,8,128,4096;32,8192,32,8,128,4096;16,16384,32,16,128,1024;64,8192,16,8,128,1024;32,8192,9,3,64,4096"
i=0
for ring in 0 1 0 1; do
  i=$((i + 1))
  step "tw_${i}_ring$ring" 120 env FOLD_ATTENTION_LIBRARY=$W FOLD_DECODE_RING=$ring python3 scripts/time_decode_window.py
done
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed" "$LOGS"/win_tests.log "$LOGS"/gpu_all.log | tail -2
for f in "$LOGS"/tw_*.log; do echo "-- $(basename $f)"; grep -v "Warn\|warn" $f; done
