#!/usr/bin/env bash
# Session 46's seventh device call (carry [".ab"]), library f44: the chunk GPU file with the
# final package (the length read once per call).
#   OUT=$OUT bash benchmarks/results/session46/scripts/round7.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh f44
F=$(L f44)
chk chunk_tests 100 env FOLD_ATTENTION_LIBRARY=$F python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode_chunk_after_history.py
grep -hE "passed|failed" "$LOGS/chunk_tests.log" | tail -2
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
