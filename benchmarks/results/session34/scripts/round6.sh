#!/usr/bin/env bash
# Session 34, round 6: ncu (full set, source counters) of split2, the default depth-16 split at
# D 128 G 4 (B8 L16K: 133 of 154 µs; B128 L4K: 460 of 532 µs, round 5), library fma1 (branch
# fma, the merged code); then every GPU test of the suite on fma1.
#   OUT=$OUT bash benchmarks/results/session34/scripts/round6.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh fma1
M=$(L fma1)
for c in "b8 8,16384,32,8,128" "b128 128,4096,32,8,128"; do
  set -- $c
  step ncu_$1 200 env FOLD_ATTENTION_LIBRARY=$M ncu --set full --import-source yes \
    --kernel-name "regex:decode_split2" --launch-skip 2 --launch-count 1 -f -o "$OUT/s2_$1" \
    python3 scripts/decode_kernel_times.py --screened-only --shapes "$2"
  ncu -i "$OUT/s2_$1.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip > "$OUT/s2_$1.src.csv.gz"
  ncu -i "$OUT/s2_$1.ncu-rep" --page details --csv > "$OUT/s2_$1.details.csv" 2>/dev/null
  python3 scripts/ncu_stalls.py "$OUT/s2_$1.src.csv.gz" 40 > "$OUT/s2_$1.stalls.txt" 2>&1
  rm -f "$OUT/s2_$1.ncu-rep"
  head -16 "$OUT/s2_$1.stalls.txt" >> "$OUT/summary.txt"
done
(cd "$OUT" && tar czf s2.tgz s2_* && rm -f s2_*)
chk gpu_suite 330 env FOLD_ATTENTION_LIBRARY=$M python3 -m pytest -q -m gpu -p no:logging tests/python
echo "== round 6 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
cat "$OUT/summary.txt"
