#!/usr/bin/env bash
# Session 47, fourth device call (carry .ab/c47a.*): why the backward's CTA chunk moves time on
# the H100 (round 3: chunks of 4 -14% time on the varlen mix, non-causal; mixed at (4, 4096,
# 32/8, 128) full; the new rule -6% at (16, 1024, 32/8, 128) full). ncu metrics of the second
# backward's main kernel (duration, DRAM bytes, L2 hit rate and reduction sectors, tensor pipe),
# each case with the default and with the other chunk.
#   OUT=$OUT bash benchmarks/results/session47/scripts/round4.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh c47a
F=$(L c47a)
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv >> "$OUT/summary.txt"
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct
M=$M,lts__t_sectors_op_red.sum,lts__t_sectors_op_read.sum
M=$M,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
NCU="ncu --clock-control none --kernel-name regex:backward_ws --launch-skip 1 --launch-count 1 --csv --metrics $M"
run() {  # NAME ENV... -- CMD...
  local name=$1; shift
  step "$name" 90 env FOLD_ATTENTION_LIBRARY=$F "$@"
}
run vl_default $NCU python3 scripts/profile_backward_varlen.py 32 8 128 0
run vl_c4 FOLD_BWD_HB_CHUNK=4 $NCU python3 scripts/profile_backward_varlen.py 32 8 128 0
run vl_c2 FOLD_BWD_HB_CHUNK=2 $NCU python3 scripts/profile_backward_varlen.py 32 8 128 0
run d4k_default $NCU python3 scripts/profile_backward.py 4 4096 32 8 128 0
run d4k_c4 FOLD_BWD_HB_CHUNK=4 $NCU python3 scripts/profile_backward.py 4 4096 32 8 128 0
run d1k_rule $NCU python3 scripts/profile_backward.py 16 1024 32 8 128 0
run d1k_old FOLD_BWD_CHUNK_RULE=0 $NCU python3 scripts/profile_backward.py 16 1024 32 8 128 0
for f in "$LOGS"/*.log; do
  echo "-- $(basename $f .log)"
  grep '^"' "$f" | awk -F'","' 'NR>1 {gsub(/"/,"",$NF); print $(NF-2), $(NF-1), $NF}'
done > "$OUT/metrics.txt"
cat "$OUT/metrics.txt" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
cat "$OUT/summary.txt"
