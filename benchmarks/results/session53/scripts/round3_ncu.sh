#!/usr/bin/env bash
# Session 53: where the B1 step's fixed costs go (notes/decode.md section 62: a one-step split2
# takes 7.2 us of its own, the front 8.5). ncu (full set, SASS source page) of one launch each of
# the front and split2 at B1 H 9/3 D 64 depth 16, OVERLAP 0 (a kernel's duration is its own work),
# L 128 (one 128-key step per split) and L 2K, library s53m (main with PAIR). Carry
# .ab/s53m.so.xz and .ab/s53m.commit:
#   OUT=$OUT bash benchmarks/results/session53/scripts/round3_ncu.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s53m
X=$(L s53m)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/summary.txt"
step kt_own 40 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_OVERLAP=0 python3 scripts/decode_kernel_times.py \
  --screened-only --shapes "1,128,9,3,64;1,2048,9,3,64"
for L in 128 2048; do
  for k in front:decode_front split2:decode_split2; do
    n=${k%%:*}_L$L
    step ncu_$n 120 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_OVERLAP=0 ncu --set full \
      --import-source yes --kernel-name "regex:${k#*:}" --launch-skip 2 --launch-count 1 -f \
      -o "$OUT/$n" python3 scripts/decode_kernel_times.py --screened-only --shapes "1,$L,9,3,64"
    ncu -i "$OUT/$n.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip > "$OUT/$n.src.csv.gz"
    ncu -i "$OUT/$n.ncu-rep" --page details --csv > "$OUT/$n.details.csv" 2>/dev/null
    python3 scripts/ncu_stalls.py "$OUT/$n.src.csv.gz" 30 > "$OUT/$n.stalls.txt" 2>&1
    rm -f "$OUT/$n.ncu-rep"
    { echo "-- $n"; python3 -c 'import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    if r["Metric Name"] in ("Duration", "Elapsed Cycles", "Registers Per Thread", "Executed Ipc Active", "Grid Size"):
        print(r["Metric Name"], r["Metric Unit"], r["Metric Value"])' "$OUT/$n.details.csv"
      head -16 "$OUT/$n.stalls.txt"; } >> "$OUT/summary.txt"
  done
done
# (eight files come back at most: the stalls and details of each; the source pages in one tar)
tar czf "$OUT/src.tgz" -C "$OUT" $(cd "$OUT" && ls *.src.csv.gz) && rm -f "$OUT"/*.src.csv.gz
tar czf "$OUT/ncu.tgz" -C "$OUT" $(cd "$OUT" && ls *.details.csv *.stalls.txt) && rm -f "$OUT"/*.details.csv "$OUT"/*.stalls.txt
cat "$OUT/summary.txt"
