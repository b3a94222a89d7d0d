#!/usr/bin/env bash
# Session 38, round 4: library s38c with split3 off (its other kernels are main's: split3 is a
# separate kernel behind FOLD_DECODE_SPLIT3=1). For the next session's B1 plan: per-kernel times
# of the real model's B1 steps (SmolLM2 capture, layer 14), depth 16 and dense, with the front /
# split overlap on (default) and off (FOLD_DECODE_OVERLAP=0: the split starts after the front,
# so its time is its own, not the wait).
#   OUT=$OUT bash benchmarks/results/session38/scripts/round4.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s38c
X=$(L s38c)
mkdir -p .cache/captures
for f in .ab/*.pt.xz; do [ -e "$f" ] && xz -dc "$f" > ".cache/captures/$(basename "${f%.xz}")"; done
for o in 1 0; do
  step kt_overlap_$o 90 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_OVERLAP=$o python3 scripts/decode_kernel_times.py \
    --capture 14 --shapes "1,2048;1,8192"
done
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
for f in "$LOGS"/kt_*.log; do echo "-- $(basename $f)"; grep -vE "^\s*$" $f | sed 's/\[[^]]*\]//g' | head -40; done
