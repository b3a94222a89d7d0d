#!/usr/bin/env bash
# Session 21, round 6: where the G 1 shape's time goes after the epilogue change (library `final`
# = main): ncu --set full of our forward (forward_v12) and backward main kernel at (8, 2048,
# 16/16, 128) causal, one launch each (stall tables, details), and the per-kernel durations of
# ours and of SDPA's cuDNN at the same shape (fixed clocks off).
#   OUT=$OUT bash benchmarks/results/session21/scripts/round6_profile.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh final
F=$(L final)
SHAPE="8 2048 16 16 128 1"
for k in "fwd regex:forward_v12 0" "bwd regex:backward_ws 1"; do
  set -- $k
  step ncu_$1 150 env FOLD_ATTENTION_LIBRARY=$F ncu --set full --import-source yes --kernel-name "$2" \
    --launch-skip $3 --launch-count 1 -f -o "$OUT/g1_$1" python3 scripts/profile_backward.py $SHAPE
  ncu -i "$OUT/g1_$1.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip > "$OUT/g1_$1.src.csv.gz"
  ncu -i "$OUT/g1_$1.ncu-rep" --page details --csv > "$OUT/g1_$1.details.csv" 2>/dev/null
  python3 scripts/ncu_stalls.py "$OUT/g1_$1.src.csv.gz" 30 > "$OUT/g1_$1.stalls.txt" 2>&1
  rm -f "$OUT/g1_$1.ncu-rep"
  head -16 "$OUT/g1_$1.stalls.txt" >> "$OUT/summary.txt"
done
step dur_ours 90 env FOLD_ATTENTION_LIBRARY=$F ncu --clock-control none --metrics gpu__time_duration.sum \
  --csv python3 scripts/profile_backward.py $SHAPE
step dur_cudnn 90 env FOLD_ATTENTION_LIBRARY=$F ncu --clock-control none --metrics gpu__time_duration.sum \
  --csv python3 scripts/profile_backward.py $SHAPE sdpa
for n in dur_ours dur_cudnn; do
  grep gpu__time_duration "$LOGS/$n.log" | awk -F'","' '{print $5, $(NF)}' | sed 's/"//g' | cut -c1-140 >> "$OUT/summary.txt"
done
cat "$OUT/summary.txt"
