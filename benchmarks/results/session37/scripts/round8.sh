#!/usr/bin/env bash
# Session 37, round 8: library s37h (main e1c2e4b: the session's final device code). Where split2's
# time goes on the real model's shape (the SmolLM2 capture, layer 14, bf16 V, the default depth
# 16): ncu with source counters, one split2 launch at B1 L8K (48 blocks: the chains) and B32 L8K
# (the four-blocks-per-SM SA form), the stall summary per SASS line (scripts/ncu_stalls.py) and
# the details page. For the next session's leaner screened step (notes/decode.md section 46).
#   OUT=$OUT bash benchmarks/results/session37/scripts/round8.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s37h
X=$(L s37h)
mkdir -p .cache/captures
for f in .ab/*.pt.xz; do [ -e "$f" ] && xz -dc "$f" > ".cache/captures/$(basename "${f%.xz}")"; done
for c in "b1 1,8192" "b32 32,8192"; do
  set -- $c
  step ncu_$1 150 env FOLD_ATTENTION_LIBRARY=$X ncu --set full --import-source yes \
    --kernel-name "regex:decode_split2" --launch-skip 2 --launch-count 1 -f -o "$OUT/split2_$1" \
    python3 scripts/decode_kernel_times.py --screened-only --capture 14 --shapes "$2"
  ncu -i "$OUT/split2_$1.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip > "$OUT/split2_$1.src.csv.gz"
  ncu -i "$OUT/split2_$1.ncu-rep" --page details --csv > "$OUT/split2_$1.details.csv" 2>/dev/null
  python3 scripts/ncu_stalls.py "$OUT/split2_$1.src.csv.gz" 40 > "$OUT/split2_$1.stalls.txt" 2>&1
  rm -f "$OUT/split2_$1.ncu-rep"
  head -30 "$OUT/split2_$1.stalls.txt" >> "$OUT/summary.txt"
done
rm -f "$OUT/logs.tgz"; tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
cat "$OUT/summary.txt"
