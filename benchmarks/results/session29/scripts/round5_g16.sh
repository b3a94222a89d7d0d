#!/usr/bin/env bash
# Session 29, round 5 (library re2): round 3's A/B had OVERLAP 5% slower at B32 L32K H 32/2
# (G 16); round 4's per-kernel run had it 1% faster. The A/B again, both arm orders, twice.
#   OUT=$OUT bash benchmarks/results/session29/scripts/round5_g16.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh re2
X=$(L re2)
SHP="32,32768,32,2,128;16,16384,64,8,128;1,8192,9,3,64"
for o in "0,-" "-,0" "0,-" "-,0"; do
  n=ab_${o/,/_}_$RANDOM
  step $n 150 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env FOLD_DECODE_OVERLAP \
    --values "$o" --rounds 7 --dense-only --shapes "$SHP"
  cat "$LOGS/$n.log" >> "$OUT/ab_g16.txt"
done
cat "$OUT/ab_g16.txt"
