#!/usr/bin/env bash
# Session 26, round 4 (library `e3`: the softmax's row maxima as a tree; `e2` = main's forward
# before it): the training GPU tests with e3, the forward protocol alternating e2 / e3 / e2 / e3
# (four processes: the change has no runtime switch), and ncu of ours and cuDNN's forward at
# (8, 2048, 16/16, 128) non-causal, the shape furthest from cuDNN.
#   OUT=$OUT bash benchmarks/results/session26/scripts/round4_tmax.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh e2 e3
chk train_tests 240 env FOLD_ATTENTION_LIBRARY=$(L e3) python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py
for n in 1 2; do
  for lib in e2 e3; do
    step pf_${lib}_$n 150 env FOLD_ATTENTION_LIBRARY=$(L $lib) python3 -m benchmarks.forward --shapes issue \
      --masks both --flex none --rounds 6 --budget-s 60 --out "$OUT/pf" --no-repo-results
    find "$OUT/pf" -name '*.jsonl' -exec cp {} "$OUT/forward_${lib}_$n.jsonl" \; 2>/dev/null
    rm -rf "$OUT/pf"
  done
done
SEC="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section InstructionStats --section SchedulerStats --section Occupancy --print-details all"
step ncu_fold_mha 120 env FOLD_ATTENTION_LIBRARY=$(L e3) ncu --clock-control none --kernel-name regex:forward_v1 \
  --launch-skip 1 --launch-count 1 $SEC python3 scripts/profile_forward.py 8 2048 16 16 128 0
step ncu_cudnn_mha 120 ncu --clock-control none --kernel-name regex:fprop \
  --launch-skip 1 --launch-count 1 $SEC python3 scripts/profile_forward.py 8 2048 16 16 128 0 sdpa
echo "== round 4 checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
