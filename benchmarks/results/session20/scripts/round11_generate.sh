#!/usr/bin/env bash
# Session 20, round 11: the generate suite with the prefill outside the timed loop (the fix of
# this round's commit), and the batch-1 step latency (append + attend, eager and graphed).
# Library: main a22fe59's kernels (.ab/waves.so.xz). Carry .cache (the capture).
#   OUT=$OUT bash benchmarks/results/session20/scripts/round11_generate.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh waves
X=$(L waves)
step gen 150 env FOLD_ATTENTION_LIBRARY=$X python3 -m benchmarks.generate --quick --budget-s 60 \
  --no-repo-results --out "$OUT/gen"
mkdir -p "$OUT/protocol" && find "$OUT/gen" -name '*.jsonl' -exec cp {} "$OUT/protocol/" \;
rm -rf "$OUT/gen"
step step_latency 100 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_step_latency.py
cat "$LOGS/step_latency.log" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
