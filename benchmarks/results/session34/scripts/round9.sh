#!/usr/bin/env bash
# Session 34, round 9: ncu (full set, source counters) of split2 at B128 L4K H 32/8 D 128 depth 16
# on the merged code (library g2 = 034d57c: the gathers by rows), to set against round 6's.
#   OUT=$OUT bash benchmarks/results/session34/scripts/round9.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh g2
M=$(L g2)
for c in "b128 128,4096,32,8,128" "b8 8,16384,32,8,128"; do
  set -- $c
  step ncu_$1 150 env FOLD_ATTENTION_LIBRARY=$M ncu --set full --import-source yes \
    --kernel-name "regex:decode_split2" --launch-skip 2 --launch-count 1 -f -o "$OUT/s2_$1" \
    python3 scripts/decode_kernel_times.py --screened-only --shapes "$2"
  ncu -i "$OUT/s2_$1.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip > "$OUT/s2_$1.src.csv.gz"
  ncu -i "$OUT/s2_$1.ncu-rep" --page details --csv > "$OUT/s2_$1.details.csv" 2>/dev/null
  python3 scripts/ncu_stalls.py "$OUT/s2_$1.src.csv.gz" 40 > "$OUT/s2_$1.stalls.txt" 2>&1
  rm -f "$OUT/s2_$1.ncu-rep"
  head -16 "$OUT/s2_$1.stalls.txt" >> "$OUT/summary.txt"
  sed -n '/shared wavefronts/,$p' "$OUT/s2_$1.stalls.txt" | head -8 >> "$OUT/summary.txt"
done
(cd "$OUT" && tar czf s2.tgz s2_* && rm -f s2_*)
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
cat "$OUT/summary.txt"
