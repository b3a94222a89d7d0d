#!/usr/bin/env bash
# Session 29, round 3 (library re2: main + the dense ring and split2 started beside the front,
# FOLD_DECODE_OVERLAP, default on): graphed interleaved A/B of the attend (OVERLAP 0 against on),
# dense and depth 16, B1 .. B128; output / LSE hashes with OVERLAP 0 and 1 (depth None and 16, full
# list); the decode GPU tests (overlap on); racecheck / memcheck / synccheck of the decode smoke.
#   OUT=$OUT bash benchmarks/results/session29/scripts/round3_overlap.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh re2
X=$(L re2)
SHP="1,32768,32,8,128;1,2048,9,3,64;1,8192,9,3,64;4,16384,32,8,128;8,16384,32,8,128;32,8192,32,8,128;128,4096,32,8,128;64,4096,16,4,64;16,16384,64,8,128;32,32768,32,2,128"
step ab_overlap 300 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env FOLD_DECODE_OVERLAP \
  --values "0,-" --rounds 7 --shapes "$SHP"
cp "$LOGS/ab_overlap.log" "$OUT/ab_overlap.txt"
for v in 0 1; do
  step hash_overlap$v 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_OVERLAP=$v python3 scripts/decode_hashes.py \
    --depths none,16,12
  cp "$LOGS/hash_overlap$v.log" "$OUT/hash_overlap$v.txt"
done
if cmp -s <(grep -v "^==" "$OUT/hash_overlap0.txt") <(grep -v "^==" "$OUT/hash_overlap1.txt"); then
  echo "== hashes overlap 0 = 1: same" >> "$OUT/summary.txt"
else
  echo "== hashes overlap 0 = 1: DIFFER" >> "$OUT/summary.txt"; fail=1
fi
chk decode_tests 240 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py
for tool in racecheck memcheck synccheck; do
  chk $tool 120 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool $tool --error-exitcode 1 \
    python3 scripts/gpu_smoke.py --decode-only
done
echo "== round checks failed: $fail" >> "$OUT/summary.txt"
grep -v "^\.\.\." "$OUT/summary.txt" | tail -40; cat "$OUT/ab_overlap.txt" | tail -25
