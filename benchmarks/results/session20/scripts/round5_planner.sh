#!/usr/bin/env bash
# Session 20, round 5: the planner (a depth's screen only where it pays) on main 1614c31 + c574e3b;
# library .ab/plan.so.xz. The decode GPU suite and the planner test (GPU and CPU), the graphed A/B
# of the default (depth 16) against the screen kept (FOLD_DECODE_SCREEN=1), then the decode
# protocol (decode, generate, invariance; FlashInfer on). Carry .whl and .cache.
#   OUT=$OUT bash benchmarks/results/session20/scripts/round5_planner.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh plan
X=$(L plan)
step decode_suite 240 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m "gpu or not gpu" \
  -p no:logging tests/python/test_gpu_decode.py tests/python/test_decode_planner.py
step planner_ab 120 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_SCREEN --values "1,-" --screened-only --rounds 7 \
  --shapes "32,32768,32,2,128;16,16384,24,2,128;32,16384,16,2,64;32,8192,32,8,128;1,8192,9,3,64"
cat "$LOGS/planner_ab.log" >> "$OUT/summary.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .whl/*.whl > /dev/null 2>&1
step pr 300 env FOLD_ATTENTION_LIBRARY=$X PYTHONPATH=$PYTHONPATH:/tmp/site FOLD_BENCH_FLASHINFER=1 \
  python3 -m benchmarks.run_all --quick --only decode,generate,invariance --budget-s 220 --out "$OUT/pr"
mkdir -p "$OUT/protocol" && find "$OUT/pr" -name '*.jsonl' -exec cp {} "$OUT/protocol/" \;
find "$OUT/pr" -name '*.md' -exec cp {} "$OUT/protocol/" \; 2>/dev/null
find "$OUT/pr" -name '*.png' -exec cp {} "$OUT/protocol/" \; 2>/dev/null
rm -rf "$OUT/pr"
cat "$OUT/summary.txt"
