#!/usr/bin/env bash
# Pipe utilisation and instruction mix of one backward main-kernel launch (ncu's
# ComputeWorkloadAnalysis and InstructionStats sections, every detail printed): which pipe
# (tensor, FMA, ALU, XU = MUFU and conversions, LSU, uniform) limits the pair loop.
#   usage: bash scripts/ncu_pipes.sh B S H Hkv D causal [sdpa]   (needs a GPU and ncu; prints to
#          stdout). With sdpa: the same sections for cuDNN's main backward kernel through torch SDPA.
set -euo pipefail
cd "$(dirname "$0")/.."
kernel=backward_sm90
[ "${7:-}" = sdpa ] && kernel=flash_bprop
ncu --clock-control none --kernel-name "regex:$kernel" --launch-skip 1 --launch-count 1 \
  --section ComputeWorkloadAnalysis --section InstructionStats --section WarpStateStats \
  --section SchedulerStats --print-details all \
  python3 scripts/profile_backward.py "$@"
