#!/usr/bin/env bash
# Session 20, round 8: the dense ring's balanced grid between one and four waves (c574e3b +
# the waves commit, .ab/waves.so.xz): the ring and invariance GPU tests, the interleaved graphed
# A/B of the new default against one block per item (the old default in that band) at D 128 and
# D 64, with WAVES_PR=1 the decode protocol too (decode, generate, invariance; carry .whl and .cache).
#   OUT=$OUT bash benchmarks/results/session20/scripts/round8_waves.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh waves
X=$(L waves)
step ring_tests 120 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py -k "ring or invarian or batch or graph"
step waves_ab 150 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_RING_BLOCKS --values "0,-" --dense-only --rounds 9 \
  --shapes "1,32768,32,8,128;2,32768,32,8,128;4,16384,32,8,128;8,8192,32,8,128;1,32768,32,8,64;4,32768,32,8,64;8,16384,16,4,64"
cat "$LOGS/waves_ab.log" >> "$OUT/summary.txt"
if [ "${WAVES_PR:-0}" = 1 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .whl/*.whl > /dev/null 2>&1
  step pr 300 env FOLD_ATTENTION_LIBRARY=$X PYTHONPATH=$PYTHONPATH:/tmp/site FOLD_BENCH_FLASHINFER=1 \
    python3 -m benchmarks.run_all --quick --only decode,generate,invariance --budget-s 220 --out "$OUT/pr"
  mkdir -p "$OUT/protocol" && find "$OUT/pr" -name '*.jsonl' -exec cp {} "$OUT/protocol/" \;
  find "$OUT/pr" -name '*.md' -exec cp {} "$OUT/protocol/" \; 2>/dev/null
  rm -rf "$OUT/pr"
fi
cat "$OUT/summary.txt"
