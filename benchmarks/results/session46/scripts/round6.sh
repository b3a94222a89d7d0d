#!/usr/bin/env bash
# Session 46's sixth device call (carry [".ab"]), library f44: the chunk GPU files and serving
# timings with the working tree's package (the history's calls capped by a workspace budget); the
# training forward's C call timed from C (.ab/fwd_call_host, benchmarks/micro/fwd_call_host.cu)
# against the package's ctypes call (host_breakdown.py), one host.
#   OUT=$OUT bash benchmarks/results/session46/scripts/round6.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh f44
F=$(L f44)
chk chunk_tests 200 env FOLD_ATTENTION_LIBRARY=$F python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode_chunk_after_history.py
step serving 120 env FOLD_ATTENTION_LIBRARY=$F python3 scripts/time_serving_ops.py
step fwd_call_host 60 ./.ab/fwd_call_host "$F"
step host_breakdown 90 env FOLD_ATTENTION_LIBRARY=$F FOLD_HOST_CASES="1,128,8,8,64,0" \
  python3 scripts/host_breakdown.py
step fwd_call_host2 60 ./.ab/fwd_call_host "$F"
grep -hE "passed|failed" "$LOGS/chunk_tests.log" | tail -2
for f in serving fwd_call_host host_breakdown fwd_call_host2; do echo "-- $f"; cat "$LOGS/$f.log"; done
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
