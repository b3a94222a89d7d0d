#!/usr/bin/env bash
# Session 47, tenth device call (carry .ab/c47d.*): library c47d = c47b + the C entry points'
# device-argument checks (device_args.cu) with the relaxed capture mode around their queries
# (round 9: without it the checks invalidated graph captures), with the package of 6bbc501 +
# the new tests: the multi-device / C-entry test file, and the GPU tests that capture graphs or
# compile (the checks' runtime queries run at capture).
#   OUT=$OUT bash benchmarks/results/session47/scripts/round10.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh c47d
C=$(L c47d)
chk md 90 env FOLD_ATTENTION_LIBRARY=$C python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_multi_device.py
# (The device budget left ~170 s: the tests that capture graphs or
# compile, where the checks' runtime queries run at capture, rather than the whole suite.)
chk gpu_capture 110 env FOLD_ATTENTION_LIBRARY=$C python3 -m pytest -q -m gpu -p no:logging \
  tests/python -k "graph or capture or compile or replay"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed|Error" "$LOGS"/md.log "$LOGS"/gpu_capture.log | tail -4
