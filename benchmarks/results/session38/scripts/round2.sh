#!/usr/bin/env bash
# Session 38, round 2: library s38a (as round 1). Where split3's time goes (it was 1.12-1.35x
# split2's in round 1): ncu with source counters, one split3 launch on the SmolLM2 capture (layer
# 14, depth 16) at B1 L8K and B32 L8K; the stall summary per SASS line (scripts/ncu_stalls.py)
# and the details page. split2's are in session37/round8 (same cases).
#   OUT=$OUT bash benchmarks/results/session38/scripts/round2.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s38a
X=$(L s38a)
mkdir -p .cache/captures
for f in .ab/*.pt.xz; do [ -e "$f" ] && xz -dc "$f" > ".cache/captures/$(basename "${f%.xz}")"; done
for c in "b1 1,8192" "b32 32,8192"; do
  set -- $c
  step ncu_$1 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_SPLIT3=1 ncu --set full --import-source yes \
    --kernel-name "regex:decode_split3" --launch-skip 2 --launch-count 1 -f -o "$OUT/split3_$1" \
    python3 scripts/decode_kernel_times.py --screened-only --capture 14 --shapes "$2"
  ncu -i "$OUT/split3_$1.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip > "$OUT/split3_$1.src.csv.gz"
  ncu -i "$OUT/split3_$1.ncu-rep" --page details --csv > "$OUT/split3_$1.details.csv" 2>/dev/null
  python3 scripts/ncu_stalls.py "$OUT/split3_$1.src.csv.gz" 40 > "$OUT/split3_$1.stalls.txt" 2>&1
  rm -f "$OUT/split3_$1.ncu-rep"
  head -30 "$OUT/split3_$1.stalls.txt" >> "$OUT/summary.txt"
done
rm -f "$OUT/logs.tgz"; tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
cat "$OUT/summary.txt"
grep -E '"(Duration|Registers Per Thread|Achieved Occupancy|Issue Slots Busy|Executed Instructions|No Eligible|Active Warps Per Scheduler|Eligible Warps Per Scheduler|Block Limit Shared Mem|Dynamic Shared Memory Per Block)"' "$OUT"/split3_*.details.csv | cut -c1-200
