#!/usr/bin/env bash
# Session 20, round 4: where does depth 16's screen pay? Interleaved graphed A/B in one process,
# per shape one cache whose depth is set to 16 or None (every key read, the dense ring) before
# each arm's capture; main's library (1614c31), .ab/main.so.xz.
#   OUT=$OUT bash benchmarks/results/session20/scripts/round4_depth_ab.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh main
X=$(L main)
S128="32,8192,32,8,128;8,16384,32,8,128;1,32768,32,8,128;16,16384,24,4,128;16,16384,32,4,128;1,32768,32,4,128;16,16384,24,2,128;32,32768,32,2,128;1,32768,32,2,128;8,8192,16,1,128"
S64="32,16384,12,4,64;32,16384,32,8,64;64,4096,16,4,64;32,16384,12,2,64;32,16384,16,2,64;64,4096,16,2,64;16,16384,32,2,64;1,8192,9,3,64;1,32768,16,2,64"
step depth_ab_128 200 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py \
  --depths "16,none" --shapes "$S128" --rounds 7
cat "$LOGS/depth_ab_128.log" >> "$OUT/summary.txt"
step depth_ab_64 200 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py \
  --depths "16,none" --shapes "$S64" --rounds 7
cat "$LOGS/depth_ab_64.log" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
