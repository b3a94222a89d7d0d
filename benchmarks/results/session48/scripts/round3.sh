#!/usr/bin/env bash
# Session 48, third device call, from branch wip/ring-sub (carry .ab/s48a.*,
# .gpu-store/smollm2-*.pt.xz). Round 2: the ring's SUB mode was slower at every shape (B1 L8K
# D 64 25.4 -> 28.5 us graphed). Where a B1 dense attend goes, kernel by kernel, with the ring
# beside the front (OVERLAP, default) and after it (FOLD_DECODE_OVERLAP=0: the ring's duration
# is then its own), SUB off and on: on the SmolLM2 capture's layer 14 at B1 L2K / L8K.
#   OUT=$OUT bash benchmarks/results/session48/scripts/round3.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s48a
A=$(L s48a)
mkdir -p .cache/captures
for f in .gpu-store/*.pt.xz; do xz -dc "$f" > ".cache/captures/$(basename "${f%.xz}")"; done
nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/summary.txt"
for ov in 1 0; do
  for sub in 0 1; do
    step "kt_ov${ov}_sub${sub}" 100 env FOLD_ATTENTION_LIBRARY=$A FOLD_DECODE_OVERLAP=$ov FOLD_DECODE_RING_SUB=$sub \
      python3 scripts/decode_kernel_times.py --dense-only --capture 14 --shapes "1,2048;1,8192"
  done
done
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
for f in "$LOGS"/kt_*.log; do echo "-- $(basename $f)"; cat $f; done
