#!/usr/bin/env bash
# Session 47, eighth device call (carry .ab/c47b.* and .ab/pyold = main 8a93519's python
# package, before the device scope / stream handle change). Written for two GPUs; no two-GPU
# machine was lent (the kind was refused), so it ran on one, where the two-device tests skip:
# 1. the new multi-device tests on the new package, then the two-device ones on the old package
#    (each in its own process: the old decode launched on the wrong device);
# 2. every GPU test file on the new package (its C calls all go through the new helpers);
# 3. the eager decode step, old / new / old / new package (PYTHONPATH), and host_breakdown's
#    pieces on the new one.
#   OUT=$OUT bash benchmarks/results/session47/scripts/round8.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh c47b
F=$(L c47b)
OLD=$PWD/.ab/pyold/python:$PWD/scripts:$PWD NEW=$PWD/python:$PWD/scripts:$PWD
nvidia-smi --query-gpu=index,name --format=csv >> "$OUT/summary.txt"
chk md_new 150 env FOLD_ATTENTION_LIBRARY=$F PYTHONPATH=$NEW python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_multi_device.py
for t in "decode_on_another_device and dense" "decode_on_another_device and depth16" \
         "training_on_another_device and dense" "training_on_another_device and varlen"; do
  step "md_old_${t// /_}" 120 env FOLD_ATTENTION_LIBRARY=$F PYTHONPATH=$OLD python3 -m pytest -q -m gpu \
    -p no:logging tests/python/test_gpu_multi_device.py -k "$t"
done
chk gpu_all 330 env FOLD_ATTENTION_LIBRARY=$F PYTHONPATH=$NEW python3 -m pytest -q -m gpu -p no:logging \
  tests/python
for p in OLD NEW OLD NEW; do
  step "eager_$p" 60 env FOLD_ATTENTION_LIBRARY=$F PYTHONPATH=${!p} python3 scripts/decode_eager_step.py \
    --steps 100 --rounds 5 --shapes "1,8192,9,3,64;1,4096,64,8,128"
done
step host_new 90 env FOLD_ATTENTION_LIBRARY=$F PYTHONPATH=$NEW FOLD_HOST_CASES="1,128,8,8,64,0" \
  python3 scripts/host_breakdown.py
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
for f in "$LOGS"/md_old_*.log; do echo "-- $(basename $f)"; tail -4 $f; done
grep -hE "passed|failed" "$LOGS"/md_new.log "$LOGS"/gpu_all.log | tail -3
for f in "$LOGS"/eager_*.log "$LOGS"/host_*.log; do echo "-- $(basename $f)"; grep -v "^\s*$" $f | tail -12; done
