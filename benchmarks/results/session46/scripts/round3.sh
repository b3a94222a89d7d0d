#!/usr/bin/env bash
# Session 46's third device call (carry [".ab"]): library f44 (main's device code), the working
# tree's package. Where a chunk's time goes, with the kernels' device times; the training C
# calls' runtime calls.
#   OUT=$OUT bash benchmarks/results/session46/scripts/round3.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh f44
F=$(L f44)
step profile 120 env FOLD_ATTENTION_LIBRARY=$F python3 scripts/profile_serving_op.py \
  --cases "4096,16;16384,16" --rows 30
step host_breakdown 120 env FOLD_ATTENTION_LIBRARY=$F python3 scripts/host_breakdown.py --profile
for f in profile host_breakdown; do
  echo "-- $f"; grep -v "^\s*$" "$LOGS/$f.log" | grep -v "fold_attention/" | tail -150
done
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
