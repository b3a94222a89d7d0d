#!/usr/bin/env bash
# Pipe utilisation and instruction mix of one backward main-kernel launch (ncu's
# ComputeWorkloadAnalysis and InstructionStats sections, every detail printed): which pipe
# (tensor, FMA, ALU, XU = MUFU and conversions, LSU, uniform) limits the pair loop.
#   usage: bash scripts/ncu_pipes.sh B S H Hkv D causal    (needs a GPU and ncu; prints to stdout)
set -euo pipefail
cd "$(dirname "$0")/.."
ncu --clock-control none --kernel-name regex:backward_sm90 --launch-skip 1 --launch-count 1 \
  --section ComputeWorkloadAnalysis --section InstructionStats --print-details all \
  python3 scripts/profile_backward.py "$@"
