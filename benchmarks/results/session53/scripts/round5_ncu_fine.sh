#!/usr/bin/env bash
# Session 53: round 3's ncu again with the finest warp-state sampling (--warp-sampling-interval 0:
# every 2^5 cycles; round 3's automatic interval gave 15-107 samples a launch, too few to place
# the time by line). Under ncu the kernels run one at a time (no PDL wait on a predecessor), yet
# the front took ~16k cycles and a one-step split2 ~16k: their own chains. B1 H 9/3 D 64 depth
# 16, library s53m (main with PAIR): the front and split2 at L 2K, split2 at L 128, the combine
# and pass 1 (decode_split_kernel's list form) at L 2K. Carry .ab/s53m.so.xz, .ab/s53m.commit:
#   OUT=$OUT bash benchmarks/results/session53/scripts/round5_ncu_fine.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s53m
X=$(L s53m)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/summary.txt"
for k in front_L2048:decode_front:2048 split2_L2048:decode_split2:2048 split2_L128:decode_split2:128 \
  combine_L2048:decode_combine:2048 pass1_L2048:decode_split_kernel:2048; do
  IFS=: read -r n rx L <<< "$k"
  step ncu_$n 120 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_OVERLAP=0 ncu --set full \
    --warp-sampling-interval 0 --import-source yes --kernel-name "regex:$rx" --launch-skip 2 \
    --launch-count 1 -f -o "$OUT/$n" python3 scripts/decode_kernel_times.py --screened-only \
    --shapes "1,$L,9,3,64"
  ncu -i "$OUT/$n.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip > "$OUT/$n.src.csv.gz"
  ncu -i "$OUT/$n.ncu-rep" --page details --csv > "$OUT/$n.details.csv" 2>/dev/null
  python3 scripts/ncu_stalls.py "$OUT/$n.src.csv.gz" 40 > "$OUT/$n.stalls.txt" 2>&1
  rm -f "$OUT/$n.ncu-rep"
  { echo "-- $n"; python3 -c 'import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    if r["Metric Name"] in ("Duration", "Elapsed Cycles", "SM Frequency", "Registers Per Thread", "Executed Ipc Active", "Grid Size", "Block Size"):
        print(r["Metric Name"], r["Metric Unit"], r["Metric Value"])' "$OUT/$n.details.csv"
    head -14 "$OUT/$n.stalls.txt"; } >> "$OUT/summary.txt"
  tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
done
tar czf "$OUT/src.tgz" -C "$OUT" $(cd "$OUT" && ls *.src.csv.gz) && rm -f "$OUT"/*.src.csv.gz
tar czf "$OUT/ncu.tgz" -C "$OUT" $(cd "$OUT" && ls *.details.csv *.stalls.txt) && rm -f "$OUT"/*.details.csv "$OUT"/*.stalls.txt
cat "$OUT/summary.txt"
