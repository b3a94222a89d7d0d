#!/usr/bin/env bash
# Session 47, eleventh device call (carry .ab/c47e.*): library c47e = c47b + the C entry points'
# device-argument checks (device_args.cu), skipped while the stream captures (round 10: cudaStreamGetDevice
# is refused on a capturing stream, which invalidated the capture), with the package of 6bbc501 +
# the new tests: the multi-device / C-entry test file, and the GPU tests that capture graphs or
# compile (the checks' runtime queries run at capture).
#   OUT=$OUT bash benchmarks/results/session47/scripts/round11.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh c47e
C=$(L c47e)
chk md 90 env FOLD_ATTENTION_LIBRARY=$C python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_multi_device.py
# (The device budget left ~170 s: the tests that capture graphs or
# compile, where the checks' runtime queries run at capture, rather than the whole suite.)
chk gpu_capture 110 env FOLD_ATTENTION_LIBRARY=$C python3 -m pytest -q -m gpu -p no:logging \
  tests/python -k "graph or capture or compile or replay"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed|Error" "$LOGS"/md.log "$LOGS"/gpu_capture.log | tail -4
