#!/usr/bin/env bash
# Session 36, round 4: the v8 ring's plane B divided by 8 on the f16 pair (one HMUL2) instead of on
# the two floats (two FMUL): v8r3 against v8r2 (main). The same bits expected (both exact): v8
# hashes of both libraries, then the v8 dense steps' graphed time, the libraries alternated.
#   OUT=$OUT bash benchmarks/results/session36/scripts/round4.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh v8r2 v8r3
# (The call's second run, with the timing fixed, sets SKIP_HASHES=1: the hashes were equal.)
if [ -z "${SKIP_HASHES:-}" ]; then
  for n in v8r2 v8r3; do
    step hash_$n 90 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/decode_hashes.py --depths none,16 --v8
  done
  same_logs hash_v8r3 hash_v8r2 "v8 hashes v8r3 = v8r2"
fi
S="32,32768,32,2,128;16,16384,32,4,128;128,4096,32,8,128;32,16384,32,4,64;1,8192,9,3,64"
i=0
for n in v8r2 v8r3 v8r3 v8r2 v8r2 v8r3; do
  i=$((i + 1))
  step ab${i}_$n 60 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/decode_env_ab.py --env FOLD_DECODE_V8_RING \
    --values -,1 --v8 --dense-only --rounds 5 --shapes "$S"
done
echo "== round 4 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
for f in "$LOGS"/ab*; do echo "## $(basename $f)"; grep "us (" "$f"; done
