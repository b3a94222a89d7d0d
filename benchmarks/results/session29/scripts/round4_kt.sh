#!/usr/bin/env bash
# Session 29, round 4 (library re2): where the overlap's 5% loss at B32 L32K H 32/2 (G 16) goes:
# per-kernel times with FOLD_DECODE_OVERLAP 0 and 1 there and at B16 L16K H 64/8 (G 8, a gain).
#   OUT=$OUT bash benchmarks/results/session29/scripts/round4_kt.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh re2
X=$(L re2)
for v in 0 1; do
  step kt_overlap$v 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_OVERLAP=$v python3 scripts/decode_kernel_times.py \
    --dense-only --shapes "32,32768,32,2,128;16,16384,64,8,128"
  cp "$LOGS/kt_overlap$v.log" "$OUT/kt_overlap$v.txt"
done
cat "$OUT/kt_overlap0.txt" "$OUT/kt_overlap1.txt"
