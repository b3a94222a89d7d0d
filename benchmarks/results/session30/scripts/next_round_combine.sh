#!/usr/bin/env bash
# Prepared in session 30, NOT RUN: the pass-0 combine's early loads (FOLD_DECODE_COMBINE_EARLY=1,
# opt-in; patches/decode-combine-early-prepared.patch, `git am` on main at c938d45 or later).
# Library: build it and carry it as .ab/ce1.so.xz (+ .ab/ce1.commit; session 30 built one from
# the patch's commit, which a new checkout will not have).
# Why: at B1 the combine (~4-5 us of a ~24-28 us capture step, ~5 us of 58-66 us at B1 L32K) is
# a chain of memory latencies: the request's length, then the partials it needs, then (at the
# end) the rows' Z for the LSE. With EARLY the first batch's partials (every split of the
# workspace's first batch: the extra ones are stale, staged and never summed), the T sums and Z
# are requested before the length; only where the combine grid is one block per SM or less, and
# as a separate instance (53 registers against 32), so large batches keep theirs. Scheduling
# only: the same bits.
# Prediction: -1 to -1.5 us per B1 attend (two latencies of ~0.6 us), so -4 to -6% on the
# captures' shape, -2% at B1 L32K; nothing from B16 up (off there).
#   OUT=$OUT bash benchmarks/results/session30/scripts/next_round_combine.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh ce1
X=$(L ce1)
chk decode_tests 240 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_COMBINE_EARLY=1 python3 -m pytest -q \
  -m gpu -p no:logging tests/python/test_gpu_decode.py tests/python/test_gpu_decode_pages.py
for v in 0 1; do
  step hash_ce$v 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_COMBINE_EARLY=$v python3 \
    scripts/decode_hashes.py --depths none,16
  cp "$LOGS/hash_ce$v.log" "$OUT/hash_ce$v.txt"
done
if cmp -s <(grep -v "^==" "$OUT/hash_ce0.txt") <(grep -v "^==" "$OUT/hash_ce1.txt"); then
  echo "== hashes combine-early 0 = 1: same" >> "$OUT/summary.txt"
else
  echo "== hashes combine-early 0 = 1: DIFFER" >> "$OUT/summary.txt"; fail=1
fi
for tool in racecheck memcheck synccheck; do
  chk $tool 120 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_COMBINE_EARLY=1 compute-sanitizer \
    --tool $tool --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
done
SHP="1,32768,32,8,128;1,2048,9,3,64;1,8192,9,3,64;4,16384,32,8,128;8,16384,32,8,128"
for o in "-,1" "1,-"; do
  n=ab_ce_${o/,/_}
  step $n 200 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env \
    FOLD_DECODE_COMBINE_EARLY --values "$o" --rounds 7 --shapes "$SHP"
  cat "$LOGS/$n.log" >> "$OUT/ab_ce.txt"
done
echo "== next round checks failed: $fail" >> "$OUT/summary.txt"
grep -v "^\.\.\." "$OUT/summary.txt" | tail -30; cat "$OUT/ab_ce.txt"
