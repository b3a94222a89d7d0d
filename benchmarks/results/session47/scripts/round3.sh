#!/usr/bin/env bash
# Session 47, third device call (carry .ab/c47a.*): library c47a = main + the backward chunk rule
# (non-causal, <= 16 key blocks: chunks of <= 4 KV head x request; FOLD_BWD_CHUNK_RULE=0 = the
# old target). The schedule bit test on it, then the backward protocol (graphed, L2 flushed, one
# process per variant) of the new default against the old rule, and against chunks of 4
# everywhere (round 2's varlen full lead: -10.6% time).
#   OUT=$OUT bash benchmarks/results/session47/scripts/round3.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh c47a
F=$(L c47a)
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv >> "$OUT/summary.txt"
chk sched_test 120 env FOLD_ATTENTION_LIBRARY=$F python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py -k "schedule"
for v in FOLD_BWD_CHUNK_RULE=0 FOLD_BWD_HB_CHUNK=4; do
  step ab_$v 300 env FOLD_ATTENTION_LIBRARY=$F FOLD_BENCH_VARIANTS=$v \
    python3 -m benchmarks.backward --shapes issue --masks both --flex none --rounds 6 --budget-s 280 \
    --out "$OUT/ab_$v" --no-repo-results
  find "$OUT/ab_$v" -name '*.jsonl' -exec cp {} "$OUT/ab_$v.jsonl" \; 2>/dev/null
  rm -rf "$OUT/ab_$v"
  python3 scripts/ab_table.py "$OUT/ab_$v.jsonl" >> "$OUT/summary.txt" 2>&1
done
cat "$OUT/summary.txt"
