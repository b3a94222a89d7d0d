#!/usr/bin/env bash
# Session 20, round 6: where a batch-1 dense step goes (main c574e3b, .ab/plan.so.xz). Per-kernel
# times (decode_kernel_times.py) of the dense and depth-16 steps at B1 L32K H 32/8 D 128 and B1
# L8K H 9/3 D 64, then ncu --set full of the dense ring at B1 L32K (one launch: its stall table).
#   OUT=$OUT bash benchmarks/results/session20/scripts/round6_b1.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh plan
X=$(L plan)
step kt_b1 120 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_kernel_times.py \
  --shapes "1,32768,32,8,128;1,8192,9,3,64;128,4096,32,8,128"
cat "$LOGS/kt_b1.log" >> "$OUT/summary.txt"
step ncu_ring_b1 200 env FOLD_ATTENTION_LIBRARY=$X ncu --set full --import-source yes \
  --kernel-name "regex:decode_split_ring" --launch-skip 2 --launch-count 1 -f -o "$OUT/ring_b1" \
  python3 scripts/decode_kernel_times.py --dense-only --shapes "1,32768,32,8,128"
ncu -i "$OUT/ring_b1.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip > "$OUT/ring_b1.src.csv.gz"
ncu -i "$OUT/ring_b1.ncu-rep" --page details --csv > "$OUT/ring_b1.details.csv" 2>/dev/null
python3 scripts/ncu_stalls.py "$OUT/ring_b1.src.csv.gz" 30 > "$OUT/ring_b1.stalls.txt" 2>&1
rm -f "$OUT/ring_b1.ncu-rep"
head -20 "$OUT/ring_b1.stalls.txt" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
