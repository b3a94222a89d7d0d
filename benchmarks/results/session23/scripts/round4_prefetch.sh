#!/usr/bin/env bash
# Session 23, round 4 (library `qpf`: main + the forward v1.2's opt-in L2 prefetch of the next
# tile, FOLD_FWD_PREFETCH = 1 (Q) / 2 (Q, K_0, V_0), and the backward CTAs' L2 prefetch of the K / V
# block one or two waves ahead, FOLD_BWD_PREFETCH = 1 / 2): the training and decode GPU tests
# (new: the prefetch and promotion settings keep bits and are checked), memcheck / racecheck of
# the training smoke with both prefetches at 2, the forward and backward protocol A/Bs.
#   OUT=$OUT bash benchmarks/results/session23/scripts/round4_prefetch.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh qpf
X=$(L qpf)
chk train_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py
chk decode_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m "gpu or not gpu" -p no:logging \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_decode_step_checks.py
for tool in memcheck racecheck; do
  chk ${tool} 120 env FOLD_ATTENTION_LIBRARY=$X FOLD_FWD_PREFETCH=2 FOLD_BWD_PREFETCH=2 compute-sanitizer --tool $tool \
    --error-exitcode 1 python3 scripts/gpu_smoke.py --training-only
done
step fwd_ab 240 env FOLD_ATTENTION_LIBRARY=$X FOLD_BENCH_VARIANTS=FOLD_FWD_PREFETCH=1,FOLD_FWD_PREFETCH=2 \
  python3 -m benchmarks.forward --shapes issue --masks both --flex none --rounds 6 --budget-s 150 \
  --out "$OUT/fab" --no-repo-results
find "$OUT/fab" -name '*.jsonl' -exec cp {} "$OUT/ab_forward.jsonl" \; 2>/dev/null
python3 scripts/ab_table.py "$OUT/ab_forward.jsonl" > "$OUT/ab_forward.txt" 2>&1
rm -rf "$OUT/fab"
cat "$OUT/ab_forward.txt" >> "$OUT/summary.txt"
step bwd_ab 300 env FOLD_ATTENTION_LIBRARY=$X FOLD_BENCH_VARIANTS=FOLD_BWD_PREFETCH=1,FOLD_BWD_PREFETCH=2 \
  python3 -m benchmarks.backward --shapes issue --masks both --flex none --rounds 6 \
  --out "$OUT/bab" --no-repo-results
find "$OUT/bab" -name '*.jsonl' -exec cp {} "$OUT/ab_backward.jsonl" \; 2>/dev/null
python3 scripts/ab_table.py "$OUT/ab_backward.jsonl" > "$OUT/ab_backward.txt" 2>&1
rm -rf "$OUT/bab"
cat "$OUT/ab_backward.txt" >> "$OUT/summary.txt"
echo "== round 4 checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
