#!/usr/bin/env bash
# Session 47, ninth device call (carry .ab/c47b.*, .ab/c47c.*, .ab/fwd_call_host): library c47c
# = c47b + the C entry points' device-argument checks (device_args.cu), with the package of
# 6bbc501 + the new tests. The multi-device / C-entry test file; the checks' host cost from C
# (benchmarks/micro/fwd_call_host.cu, c47b / c47c alternating); the GPU tests that capture
# graphs or compile (the checks' runtime queries run at capture).
#   OUT=$OUT bash benchmarks/results/session47/scripts/round9.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh c47b c47c
B=$(L c47b) C=$(L c47c)
chk md 90 env FOLD_ATTENTION_LIBRARY=$C python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_multi_device.py
i=0
for lib in B C B C; do
  i=$((i + 1)); step "fch_${i}_$lib" 30 .ab/fwd_call_host "${!lib}"
done
# (The device budget left ~270 s after a refused start: the tests that capture graphs or
# compile, where the checks' runtime queries run at capture, rather than the whole suite.)
chk gpu_capture 110 env FOLD_ATTENTION_LIBRARY=$C python3 -m pytest -q -m gpu -p no:logging \
  tests/python -k "graph or capture or compile or replay"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed|Error" "$LOGS"/md.log "$LOGS"/gpu_capture.log | tail -4
for f in "$LOGS"/fch_*.log; do echo "-- $(basename $f)"; grep -v "^\s*$" $f | tail -5; done
