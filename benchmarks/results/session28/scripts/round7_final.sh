#!/usr/bin/env bash
# Session 28, round 7 (library k6, branch kvb-dry = what merges): the forward takes the K / V
# bounds by default at G 1, D 64 / 128 (training.py's rule); racecheck-clean scan loads.
# Checks: bounds tests, training suite, racecheck / memcheck of gpu_smoke.py with the bounds
# forced on (FOLD_TRAIN_KV_BOUNDS=1: its cases are GQA), synccheck (main's D 64 three-consumer
# report, for the record); then the forward and backward protocols (defaults), published.
#   OUT=$OUT bash benchmarks/results/session28/scripts/round7_final.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh k6
X=$(L k6)
chk kvb_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_kv_bounds.py
chk train_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py
for tool in racecheck memcheck; do
  chk $tool 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_TRAIN_KV_BOUNDS=1 compute-sanitizer \
    --tool $tool --error-exitcode 1 python3 scripts/gpu_smoke.py --training-only
done
step synccheck 100 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool synccheck \
  --error-exitcode 1 --print-limit 2 python3 scripts/gpu_smoke.py --training-only
mkdir -p "$OUT/protocol"
for m in forward backward; do
  step p_$m 150 env FOLD_ATTENTION_LIBRARY=$X python3 -m benchmarks.$m --shapes issue \
    --masks both --flex none --rounds 6 --budget-s 120 --out "$OUT/p_$m" --no-repo-results
  find "$OUT/p_$m" -name '*.jsonl' -exec cp {} "$OUT/protocol/$m.jsonl" \; 2>/dev/null
  rm -rf "$OUT/p_$m"
done
tar czf "$OUT/protocol.tgz" -C "$OUT" protocol && rm -rf "$OUT/protocol"
echo "== round 7 checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
