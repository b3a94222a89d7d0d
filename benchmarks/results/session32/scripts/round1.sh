#!/usr/bin/env bash
# Session 32, round 1: session 31's two prepared fixes, run together in one library (gx = main
# 76ed184 + the guard's exact second pass + the backward grid's s clamped at 126; the two touch
# disjoint code: decode.cu / decode_step.cpp and grid_scale.h). Each prepared script runs with gx
# under both of its names and writes to its own folder; then synccheck of the training smoke
# (the forward's PTX since beff91f, non-aligned barrier in zero_v_tail), printed, not counted.
#   OUT=$OUT bash benchmarks/results/session32/scripts/round1.sh
set -u
cd "$(dirname "$0")/../../../.."
cp .ab/r1/* .ab/
cp .ab/gx.so.xz .ab/ge1.so.xz; cp .ab/gx.commit .ab/ge1.commit
cp .ab/gx.so.xz .ab/gs1.so.xz; cp .ab/gx.commit .ab/gs1.commit
S=benchmarks/results/session31/scripts
mkdir -p "$OUT/guard" "$OUT/grid" "$OUT/sync"
OUT=$OUT/guard bash $S/next_round_guard_exact.sh > "$OUT/guard.txt" 2>&1
OUT=$OUT/grid bash $S/next_round_grid_scale.sh > "$OUT/grid.txt" 2>&1
export PYTHONPATH=$PWD/python:$PWD/scripts:$PWD
timeout 150 env FOLD_ATTENTION_LIBRARY=$PWD/.gpu-libs/ge1/libfold_attention.so compute-sanitizer \
  --tool synccheck --print-limit 4 python3 scripts/gpu_smoke.py --training-only > "$OUT/sync/training.txt" 2>&1 || true
tail -5 "$OUT/sync/training.txt"
tail -25 "$OUT/guard.txt"; tail -25 "$OUT/grid.txt"
