#!/usr/bin/env bash
# Session 29, round 7: the protocol (round 6, library m29) had B1 L32K dense at 74.4 us against
# session 25's 67.7, while round 3's A/B (library re2) had the overlap 1% faster there. The
# graphed attend per library, each in its own process, alternated twice: k8 (main's decode code
# before this session; its OVERLAP arm "0" is the same code), re2 (round 3's), m29 (merged: the first item's next fetch at its end).
#   OUT=$OUT bash benchmarks/results/session29/scripts/round7_libs.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh k8 re2 m29
SHP="1,32768,32,8,128;1,8192,9,3,64;32,8192,32,8,128;128,4096,32,8,128"
for r in 1 2; do
  for lib in k8 re2 m29; do
    step ${lib}_$r 100 env FOLD_ATTENTION_LIBRARY=$(L $lib) python3 scripts/decode_env_ab.py --env FOLD_DECODE_OVERLAP \
      --values "-,0" --rounds 5 --dense-only --shapes "$SHP"
    sed "s/^/$lib r$r: /" "$LOGS/${lib}_$r.log" | grep "B=" >> "$OUT/libs.txt"
  done
done
sort -t: -k2 "$OUT/libs.txt"
