#!/usr/bin/env bash
# Session 23, round 3 (library `l2` = 343e2cb: main + the dense ring's 128-byte L2 promotion):
# the ring's fetching blocks A/B (graphed, interleaved), then the published protocols: decode
# (decode, generate, invariance; FlashInfer from .whl, the capture from .cache), backward and
# forward (issue shapes, both masks).
#   OUT=$OUT bash benchmarks/results/session23/scripts/round3_protocol.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh l2
X=$(L l2)
step blocks_ab 200 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_RING_BLOCKS --values "-,264,132" --dense-only --rounds 7 \
  --shapes "128,4096,32,8,128;32,8192,32,8,128;8,16384,32,8,128;64,4096,16,4,64"
cat "$LOGS/blocks_ab.log" >> "$OUT/summary.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .whl/*.whl > /dev/null 2>&1
step pr 330 env FOLD_ATTENTION_LIBRARY=$X PYTHONPATH=$PYTHONPATH:/tmp/site FOLD_BENCH_FLASHINFER=1 \
  python3 -m benchmarks.run_all --quick --only decode,generate,invariance --budget-s 220 --out "$OUT/pr"
mkdir -p "$OUT/protocol" && find "$OUT/pr" -name '*.jsonl' -exec cp {} "$OUT/protocol/" \;
rm -rf "$OUT/pr"
step pb 240 env FOLD_ATTENTION_LIBRARY=$X python3 -m benchmarks.backward --shapes issue --masks both \
  --flex none --rounds 6 --out "$OUT/pb" --no-repo-results
find "$OUT/pb" -name '*.jsonl' -exec cp {} "$OUT/protocol/" \; 2>/dev/null
rm -rf "$OUT/pb"
step pf 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m benchmarks.forward --shapes issue --masks both \
  --flex none --rounds 6 --budget-s 90 --out "$OUT/pf" --no-repo-results
find "$OUT/pf" -name '*.jsonl' -exec cp {} "$OUT/protocol/" \; 2>/dev/null
rm -rf "$OUT/pf"
ls -la "$OUT/protocol" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
