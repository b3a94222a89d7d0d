#!/usr/bin/env bash
# Prepared for a session that gets an H200 (carry .ab/m47.*: main 0fa671e's library, whose device
# code is main's at the end of session 47). Session 47 measured the backward's CTA chunk rules on
# H100s only. On the H200: (1) the rule's A/B (FOLD_BWD_CHUNK_RULE=0 = the old two-wave target)
# in the backward protocol, full masks; (2) chunks of 4 everywhere as a variant, whose varlen row
# says whether packed calls should take them on every device (the rule takes them below 4.2 TB/s
# only, from session 27's H200 figures of an older library); (3) the training protocol re-run
# and published (benchmarks/results/{forward,backward}.jsonl, RESULTS.md via
# `python -m benchmarks.summarize`), as session 35 did.
#   OUT=$OUT bash benchmarks/results/session47/scripts/next_round_h200_training.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh m47
F=$(L m47)
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "not an H200" >> "$OUT/summary.txt"; exit 1; }
chk sched 120 env FOLD_ATTENTION_LIBRARY=$F python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py -k "schedule"
for v in rule_off:FOLD_BWD_CHUNK_RULE=0 chunk4:FOLD_BWD_HB_CHUNK=4; do
  name=${v%%:*}
  step "ab_$name" 300 env FOLD_ATTENTION_LIBRARY=$F FOLD_BENCH_VARIANTS=${v#*:} \
    python3 -m benchmarks.backward --shapes issue --masks full --flex none --rounds 6 --budget-s 280 \
    --out "$OUT/ab_$name" --no-repo-results
  find "$OUT/ab_$name" -name '*.jsonl' -exec cp {} "$OUT/ab_$name.jsonl" \; 2>/dev/null
  rm -rf "$OUT/ab_$name"
  python3 scripts/ab_table.py "$OUT/ab_$name.jsonl" >> "$OUT/summary.txt" 2>&1
done
step p_backward 300 env FOLD_ATTENTION_LIBRARY=$F python3 -m benchmarks.backward --shapes issue \
  --masks both --flex none --rounds 6 --budget-s 280 --out "$OUT/p_backward" --no-repo-results
step p_forward 200 env FOLD_ATTENTION_LIBRARY=$F python3 -m benchmarks.forward --shapes issue \
  --masks both --flex none --rounds 6 --budget-s 180 --out "$OUT/p_forward" --no-repo-results
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
cat "$OUT/summary.txt"
