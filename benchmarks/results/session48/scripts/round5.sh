#!/usr/bin/env bash
# Session 48, fifth device call, from branch wip/ring-sub (carry .ab/s48b.*,
# .gpu-store/smollm2-*.pt.xz). Round 4: the dense ring's own time at B1 on the capture is ~10 us at
# L2K and ~12 at L8K whether each block owns a whole split (8 chunks) or a sub-split (2): a fixed
# cost, not the chunk chain. ncu --set full (source counters) of one ring launch at B1 L2K, SUB
# off and on, OVERLAP off: the details page and the SASS-level samples.
#   OUT=$OUT bash benchmarks/results/session48/scripts/round5.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s48b
A=$(L s48b)
mkdir -p .cache/captures
for f in .gpu-store/*.pt.xz; do xz -dc "$f" > ".cache/captures/$(basename "${f%.xz}")"; done
for sub in 0 1; do
  step "ncu_sub$sub" 200 env FOLD_ATTENTION_LIBRARY=$A FOLD_DECODE_OVERLAP=0 FOLD_DECODE_RING_SUB=$sub \
    ncu --set full --import-source no --kernel-name regex:split_ring --launch-skip 3 --launch-count 1 \
    -o "$OUT/ring_b1_sub$sub" python3 scripts/decode_kernel_times.py --dense-only --capture 14 --shapes "1,2048"
  ncu -i "$OUT/ring_b1_sub$sub.ncu-rep" --page details > "$OUT/ring_b1_sub${sub}_details.txt" 2>&1
  ncu -i "$OUT/ring_b1_sub$sub.ncu-rep" --page source --csv --print-source sass > "$OUT/ring_b1_sub${sub}_sass.csv" 2>&1
  xz -T4 "$OUT/ring_b1_sub${sub}_sass.csv"
  rm -f "$OUT/ring_b1_sub$sub.ncu-rep"
done
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
cat "$OUT/summary.txt"
grep -E "Duration|Elapsed Cycles|Registers|Achieved Occupancy|Issue Slots Busy|No Eligible" "$OUT"/ring_b1_sub*_details.txt
