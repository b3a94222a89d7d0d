#!/usr/bin/env bash
# Session 48, seventh device call, from branch wip/split2-window (carry .ab/s48s.*). s48s = main
# (the windowed dense ring) + split2's WIN instances: windowed screened steps with bf16 / fp16 V
# run split2 instead of the plain split. The device budget left is ~7 minutes: the window /
# sinks / pinned / chunk GPU files and the split2 tests, memcheck of the decode smoke (its window
# loop has a screened bf16 D 128 G 4 cache), the windowed steps' times with split2 (default) and
# the plain split (FOLD_DECODE_SPLIT2=0) alternating, then racecheck of the smoke.
#   OUT=$OUT bash benchmarks/results/session48/scripts/round7.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s48s
S=$(L s48s)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/summary.txt"
chk win_tests 150 env FOLD_ATTENTION_LIBRARY=$S python3 -m pytest -q -m gpu -p no:logging -x \
  tests/python/test_gpu_decode_window_sinks.py tests/python/test_gpu_decode_pinned_window.py \
  tests/python/test_gpu_decode_chunk_after_history.py tests/python/test_gpu_sinks.py
chk split2_tests 100 env FOLD_ATTENTION_LIBRARY=$S python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py -k "split2 or window or graph"
chk memcheck 60 env FOLD_ATTENTION_LIBRARY=$S compute-sanitizer --tool memcheck --error-exitcode 1 \
  python3 scripts/gpu_smoke.py --decode-only
export FOLD_DECODE_WINDOW_CASES="1,32768,32,8,128,4096;32,8192,32,8,128,4096;16,16384,32,16,128,1024;64,8192,16,8,128,1024;32,8192,9,3,64,4096"
i=0
for on in 0 1 0 1; do
  i=$((i + 1))
  step "tw_${i}_split2$on" 60 env FOLD_ATTENTION_LIBRARY=$S FOLD_DECODE_SPLIT2=$on python3 scripts/time_decode_window.py
done
chk racecheck 130 env FOLD_ATTENTION_LIBRARY=$S compute-sanitizer --tool racecheck --error-exitcode 1 \
  python3 scripts/gpu_smoke.py --decode-only
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed|rror" "$LOGS"/win_tests.log "$LOGS"/split2_tests.log | tail -4
for f in "$LOGS"/tw_*.log; do echo "-- $(basename $f)"; grep -v "Warn\|warn" $f; done
