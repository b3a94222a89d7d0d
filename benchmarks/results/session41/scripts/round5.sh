#!/usr/bin/env bash
# Session 41, fifth device call: the CUDA decode step's windows and sinks (library x41 = main
# 461f44e + patches/decode-window-sinks-cuda-prepared.patch, commit 0efa8e4 of a local branch),
# (the narrow windows' kernel split, round4.sh, was left for a later call: device time). Carry [".ab"]
# (the libraries only: with the capture, the tree passed the carry limit).
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh m41 x41
M=$(L m41)
X=$(L x41)
PD=benchmarks/results/session41/patches/decode-window-sinks-cuda-prepared.patch
INC=(--include 'python/*' --include 'tests/*' --include 'scripts/*')
git apply "${INC[@]}" "$PD"
chk dw_tests 150 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -x -p no:logging \
  tests/python/test_gpu_decode_window_sinks.py tests/python/test_decode_window_sinks.py
chk dw_memcheck 100 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool memcheck --error-exitcode 1 \
  python3 scripts/gpu_smoke.py --decode-only
chk decode_gpu 150 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging -k decode tests/python
chk dw_racecheck 120 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool racecheck --error-exitcode 1 \
  python3 scripts/gpu_smoke.py --decode-only
git apply -R "${INC[@]}" "$PD"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed" "$LOGS"/dw_tests.log "$LOGS"/decode_gpu.log | tail -4
grep -h "FAILED\|Error" "$LOGS"/dw_tests.log | head -10
