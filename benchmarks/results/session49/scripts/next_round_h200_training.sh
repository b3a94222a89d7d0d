#!/usr/bin/env bash
# Session 47's prepared H200 training call (session47/scripts/next_round_h200_training.sh), made
# to fit the device's 10-minute calls: its steps' limits added up to ~20 minutes in one call. Two
# calls now, each carrying .ab/s49m.* (prepare.sh; s49m's training kernels have session 47's SASS):
#   OUT=$OUT bash benchmarks/results/session49/scripts/next_round_h200_training.sh ab
#   OUT=$OUT bash benchmarks/results/session49/scripts/next_round_h200_training.sh protocol
# ab: the schedule tests, then the backward's CTA chunk rules' A/B on the H200 (measured on H100s
# only in session 47): FOLD_BWD_CHUNK_RULE=0 (the old two-wave target) and chunks of 4 everywhere
# (whose varlen row says whether the rule's 4.2 TB/s threshold can go). protocol: the training
# protocol re-run for publication (benchmarks/results/{forward,backward}.jsonl and RESULTS.md via
# `python -m benchmarks.summarize` afterwards, as session 35 did). Exits at once on another GPU.
set -u
cd "$(dirname "$0")/../../../.."
part=${1:-}
[ "$part" = ab ] || [ "$part" = protocol ] || { echo "usage: $0 ab|protocol" >&2; exit 2; }
lib=${FOLD_ROUND_LIB:-s49m}  # (session 50: s50m, from session50/scripts/prepare.sh)
source notes/prepared/round_common.sh "$lib"
F=$(L "$lib")
nvidia-smi --query-gpu=name --format=csv,noheader | tee -a "$OUT/summary.txt" | grep -q H200 ||
  { echo "not an H200" >> "$OUT/summary.txt"; exit 1; }
if [ "$part" = ab ]; then
  chk sched 90 env FOLD_ATTENTION_LIBRARY=$F python3 -m pytest -q -m gpu -p no:logging \
    tests/python/test_gpu_training.py -k "schedule"
  for v in rule_off:FOLD_BWD_CHUNK_RULE=0 chunk4:FOLD_BWD_HB_CHUNK=4; do
    name=${v%%:*}
    step "ab_$name" 240 env FOLD_ATTENTION_LIBRARY=$F FOLD_BENCH_VARIANTS=${v#*:} \
      python3 -m benchmarks.backward --shapes issue --masks full --flex none --rounds 6 \
      --budget-s 220 --out "$OUT/ab_$name" --no-repo-results
    find "$OUT/ab_$name" -name '*.jsonl' -exec cp {} "$OUT/ab_$name.jsonl" \; 2>/dev/null
    rm -rf "$OUT/ab_$name"
    python3 scripts/ab_table.py "$OUT/ab_$name.jsonl" >> "$OUT/summary.txt" 2>&1
  done
else
  step p_backward 300 env FOLD_ATTENTION_LIBRARY=$F python3 -m benchmarks.backward --shapes issue \
    --masks both --flex none --rounds 6 --budget-s 280 --out "$OUT/p_backward" --no-repo-results
  step p_forward 240 env FOLD_ATTENTION_LIBRARY=$F python3 -m benchmarks.forward --shapes issue \
    --masks both --flex none --rounds 6 --budget-s 200 --out "$OUT/p_forward" --no-repo-results
fi
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
cat "$OUT/summary.txt"
exit $fail
