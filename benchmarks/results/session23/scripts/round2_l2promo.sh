#!/usr/bin/env bash
# Session 23, round 2 (library `l2`: main + the dense ring's TMA maps with 128-byte L2 promotion,
# FOLD_DECODE_L2PROMO / FOLD_TRAIN_L2PROMO knobs). Decode GPU tests; output / LSE hashes with the
# default and with 256 (must be equal: the granule cannot change bits); graphed interleaved A/B of
# the decode promotion on dense shapes; the forward and backward protocols' A/B of the training
# maps' promotion (128 and none against the default 256; graphed, L2 flushed, one process).
#   OUT=$OUT bash benchmarks/results/session23/scripts/round2_l2promo.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh l2
X=$(L l2)
chk checks 240 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m "gpu or not gpu" -p no:logging \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_decode_step_checks.py
H="python3 scripts/decode_hashes.py --depths none,16"
chk h_def 120 env FOLD_ATTENTION_LIBRARY=$X $H
chk h_256 120 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_L2PROMO=256 $H
if diff -q "$LOGS/h_def.log" "$LOGS/h_256.log" > /dev/null; then echo "== hashes 128 = 256" >> "$OUT/summary.txt";
else echo "== hashes 128 DIFFER from 256" >> "$OUT/summary.txt"; fail=1; fi
S="1,32768,32,8,128;8,16384,32,8,128;32,8192,32,8,128;128,4096,32,8,128;16,16384,32,4,128;32,32768,32,2,128;1,8192,9,3,64;64,4096,16,4,64;32,16384,16,2,64"
step promo_ab 300 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_L2PROMO --values "256,-,0,64" --dense-only --rounds 7 --shapes "$S"
cat "$LOGS/promo_ab.log" >> "$OUT/summary.txt"
V=FOLD_TRAIN_L2PROMO=128,FOLD_TRAIN_L2PROMO=0
step fwd_ab 240 env FOLD_ATTENTION_LIBRARY=$X FOLD_BENCH_VARIANTS=$V python3 -m benchmarks.forward \
  --shapes issue --masks both --flex none --rounds 6 --budget-s 150 --out "$OUT/fab" --no-repo-results
find "$OUT/fab" -name '*.jsonl' -exec cp {} "$OUT/ab_forward.jsonl" \; 2>/dev/null
python3 scripts/ab_table.py "$OUT/ab_forward.jsonl" > "$OUT/ab_forward.txt" 2>&1
rm -rf "$OUT/fab"
cat "$OUT/ab_forward.txt" >> "$OUT/summary.txt"
step bwd_ab 300 env FOLD_ATTENTION_LIBRARY=$X FOLD_BENCH_VARIANTS=$V python3 -m benchmarks.backward \
  --shapes issue --masks both --flex none --rounds 6 --out "$OUT/bab" --no-repo-results
find "$OUT/bab" -name '*.jsonl' -exec cp {} "$OUT/ab_backward.jsonl" \; 2>/dev/null
python3 scripts/ab_table.py "$OUT/ab_backward.jsonl" > "$OUT/ab_backward.txt" 2>&1
rm -rf "$OUT/bab"
cat "$OUT/ab_backward.txt" >> "$OUT/summary.txt"
echo "== round 2 checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
