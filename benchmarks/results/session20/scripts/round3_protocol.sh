#!/usr/bin/env bash
# Session 20, round 3: main's library (1614c31, the persistent dense ring merged) through the
# whole decode GPU suite, then the decode protocol (decode, generate, invariance; FlashInfer on).
# Library .ab/main.so.xz with .ab/main.commit; carry .whl and .cache.
#   OUT=$OUT bash benchmarks/results/session20/scripts/round3_protocol.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh main
X=$(L main)
step decode_suite 240 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .whl/*.whl > /dev/null 2>&1
step pr 300 env FOLD_ATTENTION_LIBRARY=$X PYTHONPATH=$PYTHONPATH:/tmp/site FOLD_BENCH_FLASHINFER=1 \
  python3 -m benchmarks.run_all --quick --only decode,generate,invariance --budget-s 220 --out "$OUT/pr"
mkdir -p "$OUT/protocol" && find "$OUT/pr" -name '*.jsonl' -exec cp {} "$OUT/protocol/" \;
find "$OUT/pr" -name '*.md' -exec cp {} "$OUT/protocol/" \; 2>/dev/null
rm -rf "$OUT/pr"
cat "$OUT/summary.txt"
