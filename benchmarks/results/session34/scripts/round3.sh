#!/usr/bin/env bash
# Session 34, round 3: ncu (full set, source counters) of the dense ring where it streams poorly:
# D 64 G 3 at B8 L8K (the capture's shape at batch 8: 43.7 µs, ~1.2 TB/s, round 2) and D 128 G 16
# at B32 L32K (~81% of the ceiling), with B128 L4K G 4 (~92%) beside them. Library s33e = main.
#   OUT=$OUT bash benchmarks/results/session34/scripts/round3.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s33e
M=$(L s33e)
for c in "b8d64 8,8192,9,3,64" "g16 32,32768,32,2,128" "b128 128,4096,32,8,128"; do
  set -- $c
  step ncu_$1 200 env FOLD_ATTENTION_LIBRARY=$M ncu --set full --import-source yes \
    --kernel-name "regex:decode_split_ring" --launch-skip 2 --launch-count 1 -f -o "$OUT/ring_$1" \
    python3 scripts/decode_kernel_times.py --dense-only --shapes "$2"
  ncu -i "$OUT/ring_$1.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip > "$OUT/ring_$1.src.csv.gz"
  ncu -i "$OUT/ring_$1.ncu-rep" --page details --csv > "$OUT/ring_$1.details.csv" 2>/dev/null
  python3 scripts/ncu_stalls.py "$OUT/ring_$1.src.csv.gz" 30 > "$OUT/ring_$1.stalls.txt" 2>&1
  rm -f "$OUT/ring_$1.ncu-rep"
  head -20 "$OUT/ring_$1.stalls.txt" >> "$OUT/summary.txt"
done
cd "$OUT" && tar czf ring.tgz ring_* && rm -f ring_*
cat "$OUT/summary.txt"
