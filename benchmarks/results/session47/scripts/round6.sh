#!/usr/bin/env bash
# Session 47, sixth device call (carry .ab/c47b.*): does the forward on packed non-causal
# requests also re-read from DRAM what its chunk order evicts (the backward's did: round 4)?
# ncu duration / DRAM bytes of the forward kernel on the issue's varlen mix, full mask, with
# FOLD_FWD_HB_CHUNK unset (one chunk of every pair) / 8 / 16 / 32 (query heads per chunk); then the
# forward protocol (full masks) with FOLD_FWD_HB_CHUNK=16 as a variant arm (its varlen row only
# is the question: the variable overrides the dense shapes' targets too).
#   OUT=$OUT bash benchmarks/results/session47/scripts/round6.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh c47b
F=$(L c47b)
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv >> "$OUT/summary.txt"
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct
NCU="ncu --clock-control none --kernel-name regex:forward_v12 --launch-count 1 --csv --metrics $M"
for c in "" 8 16 32; do
  step "fwd_vl_c${c:-default}" 90 env FOLD_ATTENTION_LIBRARY=$F FOLD_FWD_HB_CHUNK=$c \
    $NCU python3 scripts/profile_backward_varlen.py 32 8 128 0
done
for f in "$LOGS"/fwd_vl_*.log; do
  echo "-- $(basename $f .log)"
  grep '^"' "$f" | awk -F'","' 'NR>1 {gsub(/"/,"",$NF); print $5, $(NF-2), $(NF-1), $NF}' | cut -c1-160
done >> "$OUT/summary.txt"
step ab 200 env FOLD_ATTENTION_LIBRARY=$F FOLD_BENCH_VARIANTS=FOLD_FWD_HB_CHUNK=16 \
  python3 -m benchmarks.forward --shapes issue --masks full --flex none --rounds 6 --budget-s 180 \
  --out "$OUT/ab" --no-repo-results
find "$OUT/ab" -name '*.jsonl' -exec cp {} "$OUT/ab_fwd_c16.jsonl" \; 2>/dev/null
rm -rf "$OUT/ab"
python3 scripts/ab_table.py "$OUT/ab_fwd_c16.jsonl" >> "$OUT/summary.txt" 2>&1
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
cat "$OUT/summary.txt"
