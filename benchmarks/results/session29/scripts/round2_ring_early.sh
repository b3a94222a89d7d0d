#!/usr/bin/env bash
# Session 29, round 2 (library re1: main + the dense ring started beside the front,
# FOLD_DECODE_RING_EARLY, default on): the decode GPU tests (early on), output / LSE hashes with
# EARLY 0 and 1 (depth None and 16), racecheck / memcheck of the decode smoke, graphed interleaved
# A/B of the dense attend (EARLY 0 against on) at B1 .. B128.
#   OUT=$OUT bash benchmarks/results/session29/scripts/round2_ring_early.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh re1
X=$(L re1)
SHP="1,32768,32,8,128;1,2048,9,3,64;1,8192,9,3,64;4,16384,32,8,128;8,16384,32,8,128;32,8192,32,8,128;128,4096,32,8,128;64,4096,16,4,64"
step ab_early 240 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env FOLD_DECODE_RING_EARLY \
  --values "0,-" --rounds 7 --dense-only --shapes "$SHP"
cp "$LOGS/ab_early.log" "$OUT/ab_early.txt"
for v in 0 1; do
  step hash_early$v 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_RING_EARLY=$v python3 scripts/decode_hashes.py \
    --depths none,16 --quick
  cp "$LOGS/hash_early$v.log" "$OUT/hash_early$v.txt"
done
if cmp -s <(grep -v "^==" "$OUT/hash_early0.txt") <(grep -v "^==" "$OUT/hash_early1.txt"); then
  echo "== hashes early 0 = 1: same" >> "$OUT/summary.txt"
else
  echo "== hashes early 0 = 1: DIFFER" >> "$OUT/summary.txt"; fail=1
fi
chk decode_tests 240 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py
for tool in racecheck memcheck; do
  chk $tool 120 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool $tool --error-exitcode 1 \
    python3 scripts/gpu_smoke.py --decode-only
done
echo "== round checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"; cat "$OUT/ab_early.txt" | tail -30
