#!/usr/bin/env bash
# Prepared after session 23 (not run): where the decode front's time goes at large batch (the
# dense attend's largest cost outside the ring: ~37-44 µs at B128 L4K H 32/8 D 128, ~18 µs at
# B32 L8K; notes/decode.md section 33). ncu with source counters, one launch each; the stall
# summary per SASS line (scripts/ncu_stalls.py) says which of the front's dependent loads, its
# barriers or its arithmetic (the sample's int8 MMAs, the q rotation, Z's exp2 and arg-max rounds)
# the warps wait on. Library `main` (.ab/main.so.xz, built from main).
#   OUT=$OUT bash notes/prepared/next_round_front_profile.sh
set -u
cd "$(dirname "$0")/../.."
source notes/prepared/round_common.sh main
M=$(L main)
for c in "b128 128,4096,32,8,128" "b32 32,8192,32,8,128"; do
  set -- $c
  step ncu_$1 200 env FOLD_ATTENTION_LIBRARY=$M ncu --set full --import-source yes \
    --kernel-name "regex:decode_front" --launch-skip 2 --launch-count 1 -f -o "$OUT/front_$1" \
    python3 scripts/decode_kernel_times.py --dense-only --shapes "$2"
  ncu -i "$OUT/front_$1.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip > "$OUT/front_$1.src.csv.gz"
  ncu -i "$OUT/front_$1.ncu-rep" --page details --csv > "$OUT/front_$1.details.csv" 2>/dev/null
  python3 scripts/ncu_stalls.py "$OUT/front_$1.src.csv.gz" 30 > "$OUT/front_$1.stalls.txt" 2>&1
  rm -f "$OUT/front_$1.ncu-rep"
  head -20 "$OUT/front_$1.stalls.txt" >> "$OUT/summary.txt"
done
cat "$OUT/summary.txt"
