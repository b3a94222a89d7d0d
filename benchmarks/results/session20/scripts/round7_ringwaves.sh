#!/usr/bin/env bash
# Session 20, round 7: the dense ring's grid where its items fill a little over one wave (B1 L32K:
# 520 items, 396 resident blocks: a second wave of 124 blocks, one per SM). Interleaved graphed
# A/B of FOLD_DECODE_RING_BLOCKS: 0 (one block per item, the default there), items / 2 rounded up
# (two items per block, two waves' worth of blocks), the resident count, and the default.
#   OUT=$OUT bash benchmarks/results/session20/scripts/round7_ringwaves.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh plan
X=$(L plan)
step ab_b1 150 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_RING_BLOCKS --values "0,260,264,396,-" --dense-only --rounds 9 \
  --shapes "1,32768,32,8,128;1,32768,32,4,128"
cat "$LOGS/ab_b1.log" >> "$OUT/summary.txt"
ab() {  # ab NAME VALUES SHAPES
  step "$1" 120 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py \
    --env FOLD_DECODE_RING_BLOCKS --values "$2" --dense-only --rounds 9 --shapes "$3"
  cat "$LOGS/$1.log" >> "$OUT/summary.txt"
}
# items: B2 L32K 2 x 65 x 8 = 1,040 (2.6 waves of 396: 347 blocks take 3 each); B4 L16K 1,056
# (352); B8 L8K 1,088 (363). (B1 L32K H 32/4: 260 items, one wave: a control.)
ab ab_b2 "0,347,396,-" "2,32768,32,8,128"
ab ab_b4 "0,352,396,-" "4,16384,32,8,128"
ab ab_b8 "0,363,396,-" "8,8192,32,8,128"
cat "$OUT/summary.txt"
