#!/usr/bin/env bash
# Session 20, round 10: split2's forms against the launcher's pick, after sessions 14-18's cuts
# (the pick is session 13's measurement, notes/decode.md section 21). Interleaved graphed A/B at
# depth 16 of FOLD_DECODE_SPLIT2_SA (-: the pick, 0: registers, 1: plane A through shared memory)
# and FOLD_DECODE_SPLIT2_OCC (-: the pick, 2 / 3 blocks per SM where registers hold plane A).
# Every form gives the same bits (test_decode_split2_same_bits). Library: main a22fe59.
#   OUT=$OUT bash benchmarks/results/session20/scripts/round10_split2_forms.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh waves
X=$(L waves)
ab() {  # ab NAME ENV VALUES SHAPES
  step "$1" 150 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py \
    --env "$2" --values "$3" --screened-only --rounds 7 --shapes "$4"
  cat "$LOGS/$1.log" >> "$OUT/summary.txt"
}
ab sa FOLD_DECODE_SPLIT2_SA "-,0,1" \
  "1,32768,32,8,128;2,32768,32,8,128;4,16384,32,8,128;8,16384,32,8,128;32,8192,32,8,128;128,4096,32,8,128;4,16384,32,4,128;16,16384,32,4,128;32,16384,32,8,64;8,8192,12,4,64"
ab occ FOLD_DECODE_SPLIT2_OCC "-,2,3" \
  "1,32768,32,8,128;1,16384,32,8,128;1,8192,9,3,64;32,16384,32,8,64"
cat "$OUT/summary.txt"
