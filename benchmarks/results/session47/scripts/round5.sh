#!/usr/bin/env bash
# Session 47, fifth device call (carry .ab/c47b.*): library c47b = main + the backward chunk
# rule extended to packed (varlen) non-causal calls on devices below 4.2 TB/s of DRAM
# bandwidth. The training GPU tests on schedules and varlen; the backward protocol (full masks)
# of the new default against FOLD_BWD_CHUNK_RULE=0 (the two-wave target everywhere); and ncu
# durations / DRAM bytes of the main kernel for packed requests of equal length (4 x 4096,
# 2 x 8192: the case where dense S 4096 / 8192 lost with small chunks on the H200).
#   OUT=$OUT bash benchmarks/results/session47/scripts/round5.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh c47b
F=$(L c47b)
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv >> "$OUT/summary.txt"
chk train_tests 200 env FOLD_ATTENTION_LIBRARY=$F python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py -k "schedule or varlen"
step ab 300 env FOLD_ATTENTION_LIBRARY=$F FOLD_BENCH_VARIANTS=FOLD_BWD_CHUNK_RULE=0 \
  python3 -m benchmarks.backward --shapes issue --masks full --flex none --rounds 6 --budget-s 280 \
  --out "$OUT/ab" --no-repo-results
find "$OUT/ab" -name '*.jsonl' -exec cp {} "$OUT/ab_rule_off.jsonl" \; 2>/dev/null
rm -rf "$OUT/ab"
python3 scripts/ab_table.py "$OUT/ab_rule_off.jsonl" >> "$OUT/summary.txt" 2>&1
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
NCU="ncu --clock-control none --kernel-name regex:backward_ws --launch-skip 1 --launch-count 1 --csv --metrics $M"
for L in 4096,4096,4096,4096 8192,8192; do
  for r in 1 0; do
    step "eq_${L//,/_}_rule$r" 90 env FOLD_ATTENTION_LIBRARY=$F FOLD_BWD_CHUNK_RULE=$r \
      $NCU python3 scripts/profile_backward_varlen.py 32 8 128 0 $L
  done
done
for f in "$LOGS"/eq_*.log; do
  echo "-- $(basename $f .log)"
  grep '^"' "$f" | awk -F'","' 'NR>1 {gsub(/"/,"",$NF); print $(NF-2), $(NF-1), $NF}'
done >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
cat "$OUT/summary.txt"
