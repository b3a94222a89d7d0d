#!/usr/bin/env bash
# Session 21, round 7: the forward's tile-order chunk for causal shapes (library `final` = main):
# ncu of round 6 showed the G 1 causal forward at 69% DRAM (each query block re-reads its head's
# K / V from DRAM: one chunk of every (request, head) pair, longest-first). Graphed sweep of
# FOLD_FWD_HB_CHUNK against the default on the benchmark's shapes (time_forward_variants.py).
#   OUT=$OUT bash benchmarks/results/session21/scripts/round7_fwd_chunk.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh final
F=$(L final)
step sweep 240 env FOLD_ATTENTION_LIBRARY=$F python3 scripts/time_forward_variants.py --graph default \
  FOLD_FWD_HB_CHUNK=8 FOLD_FWD_HB_CHUNK=16 FOLD_FWD_HB_CHUNK=32 FOLD_FWD_HB_CHUNK=64
cat "$LOGS/sweep.log" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
