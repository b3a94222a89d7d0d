#!/usr/bin/env bash
# Session 31, round 5 (carry .ab/r4; the last ~4 minutes of the device budget): round 4's CDP
# library hung where the guard flagged a group; this times only the common path (nothing
# flagged), CDP on / off, in both arm orders, at two B1 shapes.
#   OUT=$OUT bash benchmarks/results/session31/scripts/round5.sh
set -u
cd "$(dirname "$0")/../../../.."
mkdir -p .gpu-libs/cdp1 && xz -dc .ab/r4/cdp1.so.xz > .gpu-libs/cdp1/libfold_attention.so
cp .ab/r4/cdp1.commit .gpu-libs/cdp1/commit
export PYTHONPATH=$PWD/python:$PWD/scripts:$PWD PYTHONUNBUFFERED=1
for o in "0,-" "-,0"; do
  FOLD_ATTENTION_LIBRARY=$PWD/.gpu-libs/cdp1/libfold_attention.so timeout 40 python3 \
    scripts/decode_env_ab.py --env FOLD_DECODE_CDP --values "$o" --rounds 5 \
    --shapes "1,2048,9,3,64;1,32768,32,8,128" >> "$OUT/ab_cdp.txt" 2>&1
done
cat "$OUT/ab_cdp.txt"
