#!/usr/bin/env bash
# Session 31, round 2 (carry .ab/r2: library fp1 = branch fuse-p1, the combine and pass 1 in one
# launch where the combine's grid is small; FOLD_DECODE_FUSE_P1=0 two launches, 2 one everywhere).
#   OUT=$OUT bash benchmarks/results/session31/scripts/round2.sh
set -u
cd "$(dirname "$0")/../../../.."
cp .ab/r2/* .ab/
source notes/prepared/round_common.sh fp1
X=$(L fp1)
chk decode_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python -k "decode or cache or guard"
chk decode_tests_fuse2 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_FUSE_P1=2 python3 -m pytest -q \
  -m gpu -p no:logging tests/python/test_gpu_decode.py
for v in 0 1 2; do
  step hash_f$v 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_FUSE_P1=$v python3 \
    scripts/decode_hashes.py --depths none,16
  cp "$LOGS/hash_f$v.log" "$OUT/hash_f$v.txt"
done
for v in 1 2; do
  if cmp -s <(grep -v "^==" "$OUT/hash_f0.txt") <(grep -v "^==" "$OUT/hash_f$v.txt"); then
    echo "== hashes fuse 0 = $v: same" >> "$OUT/summary.txt"
  else
    echo "== hashes fuse 0 = $v: DIFFER" >> "$OUT/summary.txt"; fail=1
  fi
done
for tool in racecheck memcheck synccheck; do
  chk $tool 120 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool $tool --error-exitcode 1 \
    python3 scripts/gpu_smoke.py --decode-only
done
SHP="1,32768,32,8,128;1,2048,9,3,64;1,8192,9,3,64;4,16384,32,8,128;8,16384,32,8,128"
for o in "0,-" "-,0"; do
  n=ab_f_${o/,/_}
  step $n 150 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env \
    FOLD_DECODE_FUSE_P1 --values "$o" --rounds 7 --shapes "$SHP"
  cat "$LOGS/$n.log" >> "$OUT/ab_fuse.txt"
done
step ab_f2 150 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env FOLD_DECODE_FUSE_P1 \
  --values "0,2" --rounds 7 --shapes "16,16384,32,8,128;32,8192,32,8,128;64,4096,16,4,64"
cat "$LOGS/ab_f2.log" >> "$OUT/ab_fuse.txt"
for v in 0 1; do
  step guard_worst_b8_f$v 120 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_FUSE_P1=$v python3 \
    scripts/decode_guard_worst.py 8 32768 32 8 128
  step guard_worst_b2_f$v 120 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_FUSE_P1=$v python3 \
    scripts/decode_guard_worst.py 2 32768 32 8 128
done
echo "== round 2 checks failed: $fail" >> "$OUT/summary.txt"
grep -v "^\.\.\." "$OUT/summary.txt" | tail -60; cat "$OUT/ab_fuse.txt"
