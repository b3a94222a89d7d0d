#!/usr/bin/env bash
# Session 25, round 5 (library `c4` = d4cc45e, main's forward): a source-level ncu profile of the
# forward at (16, 1024, 32/8, 128) non-causal, the shape furthest from cuDNN: stall reasons per
# SASS instruction (scripts/ncu_stalls.py), to place the fixed-latency waits and the long
# scoreboard that round 2's section comparison showed.
#   OUT=$OUT bash benchmarks/results/session25/scripts/round5_profile.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh c4
X=$(L c4)
step ncu_src_d128 200 env FOLD_ATTENTION_LIBRARY=$X ncu --kernel-name regex:forward_v1 --launch-skip 1 \
  --launch-count 1 --set full --import-source yes -f -o "$OUT/fwd_d128" python3 scripts/profile_forward.py 16 1024 32 8 128 0
ncu -i "$OUT/fwd_d128.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip > "$OUT/fwd_d128.src.csv.gz"
python3 scripts/ncu_stalls.py "$OUT/fwd_d128.src.csv.gz" 60 > "$OUT/fwd_d128.stalls.txt" 2>&1
rm -f "$OUT/fwd_d128.ncu-rep" "$OUT/logs.tgz"
head -n 80 "$OUT/fwd_d128.stalls.txt"
