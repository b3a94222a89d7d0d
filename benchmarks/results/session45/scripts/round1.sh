#!/usr/bin/env bash
# Session 45's first call (carry [".ab"]): main's library f44 (.ab/f44.so.xz; main's C / CUDA
# are unchanged since its commit), then
#   1. session 44's final check in full (its GPU files, the examples on CUDA, time_window.py
#      --graphed on both training routes, time_serving_ops.py);
#   2. scripts/host_breakdown.py: an eager training call's host time split into the library's
#      C calls, torch's pieces and the rest (Python and dispatch).
#   OUT=$OUT bash benchmarks/results/session45/scripts/round1.sh
set -u
cd "$(dirname "$0")/../../../.."
OUT=$OUT bash benchmarks/results/session44/scripts/final_check.sh
mv "$OUT/logs.tgz" "$OUT/final_check_logs.tgz"
source notes/prepared/round_common.sh f44
F=$(L f44)
step host_breakdown 120 env FOLD_ATTENTION_LIBRARY=$F python3 scripts/host_breakdown.py
cat "$LOGS/host_breakdown.log"
# 3. benchmarks/micro/conditional_node.cu (built here: .ab/conditional_node): a graph step's last
#    boundary against an IF node that skips it (notes/decode.md section 54).
step conditional_node 60 bash -c "./.ab/conditional_node 16 264 && ./.ab/conditional_node 1024 264"
cat "$LOGS/conditional_node.log"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
