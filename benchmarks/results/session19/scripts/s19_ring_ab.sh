#!/usr/bin/env bash
# Session 19, fifth call: library `new` (items fetched from a counter, 5d8f2f9): the dense
# ring's default grid against one block per item (FOLD_DECODE_RING_BLOCKS=0), graphed and
# interleaved in one process (scripts/decode_env_ab.py), because the fourth call's separate
# processes differed by less than their run-to-run spread.
#   OUT=$OUT bash benchmarks/results/session19/scripts/s19_ring_ab.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh new
DSH="128,4096,32,8,128;32,8192,32,8,128;8,16384,32,8,128;1,32768,32,8,128;16,16384,32,4,128;32,32768,32,2,128;32,16384,16,2,64"
step ring_ab 200 env FOLD_ATTENTION_LIBRARY=$(L new) python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_RING_BLOCKS --values "0,-" --dense-only --shapes "$DSH" --rounds 9
cat "$LOGS/ring_ab.log" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
