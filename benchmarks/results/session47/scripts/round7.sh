#!/usr/bin/env bash
# Session 47, seventh device call (carry .ab/c47b.*): every training GPU file on c47b (main's
# training code after both chunk rules).
#   OUT=$OUT bash benchmarks/results/session47/scripts/round7.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh c47b
F=$(L c47b)
chk train_tests 400 env FOLD_ATTENTION_LIBRARY=$F python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py tests/python/test_gpu_kv_bounds.py tests/python/test_gpu_preprocess.py \
  tests/python/test_gpu_sinks.py tests/python/test_gpu_window.py
grep -hE "passed|failed" "$LOGS/train_tests.log" | tail -3
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
cat "$OUT/summary.txt"
