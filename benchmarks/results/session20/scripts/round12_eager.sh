#!/usr/bin/env bash
# Session 20, round 12: where the eager batch-1 step's host time goes now (the generate suite:
# 250-363 us per eager step against SDPA's 87-98). scripts/decode_eager_overhead.py (B1 H 64/8
# D 128 L 4K, dense): the full step, the op, the C entry point with prebuilt descriptors, the
# checks and the lengths read, in one process. Library: main's kernels (.ab/waves.so.xz).
#   OUT=$OUT bash benchmarks/results/session20/scripts/round12_eager.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh waves
X=$(L waves)
step eager 120 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_eager_overhead.py
cat "$LOGS/eager.log" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
