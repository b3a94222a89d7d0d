#!/usr/bin/env bash
# Session 21, round 3: main's next state (library `ring`: the precheck, the ring's whole-chunk form,
# 4 stages at D 64, v8 in the planner): decode GPU tests, the sanitizers (2 fetching blocks; the
# smoke now has a dense D 64 G 4 cache), then the decode protocol (decode, generate, invariance;
# carry .whl and .cache).
#   OUT=$OUT bash benchmarks/results/session21/scripts/round3_protocol.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh ring
R=$(L ring)
chk checks 200 env FOLD_ATTENTION_LIBRARY=$R python3 -m pytest -q -m "gpu or not gpu" -p no:logging \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_decode_step_checks.py
for tool in racecheck memcheck synccheck; do
  chk ${tool} 120 env FOLD_ATTENTION_LIBRARY=$R FOLD_DECODE_RING_BLOCKS=2 compute-sanitizer --tool $tool \
    --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
done
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .whl/*.whl > /dev/null 2>&1
step pr 300 env FOLD_ATTENTION_LIBRARY=$R PYTHONPATH=$PYTHONPATH:/tmp/site FOLD_BENCH_FLASHINFER=1 \
  python3 -m benchmarks.run_all --quick --only decode,generate,invariance --budget-s 220 --out "$OUT/pr"
mkdir -p "$OUT/protocol" && find "$OUT/pr" -name '*.jsonl' -exec cp {} "$OUT/protocol/" \;
find "$OUT/pr" -name '*.md' -exec cp {} "$OUT/protocol/" \; 2>/dev/null
rm -rf "$OUT/pr"
echo "== round 3 checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
