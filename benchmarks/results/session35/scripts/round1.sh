#!/usr/bin/env bash
# Prepared in session 34, NOT RUN (too little device time was left to start a machine; about 3
# minutes): `session34/patches/decode-split2-swizzled-stage-prepared.patch` (`git am` on main;
# build it as .ab/swz1.so.xz, main's as .ab/g2.so.xz, each with its .commit; notes/prepared/
# README.md says how). split2's value stage at D 128 as 256-byte rows with 16-byte pieces
# swizzled by row (no padding): the copies by rows then write aligned 128-byte lines (round 9: the
# 272-byte padded rows cost ~3 wavefronts per one needed). Compiled only: D 128 instances -1 to
# -2 registers, no spills; D 64 unchanged. The decode GPU tests, decode hashes against round 8's
# g2 log (main 034d57c's bits: the same copies, the same bits expected), memcheck of the decode
# smoke (racecheck too if time allows), then the graphed attend, libraries alternated twice each.
# Prediction: -1 to -3% at D 128 G 4 / 8 from B8 up.
#   OUT=$OUT bash benchmarks/results/session34/scripts/next_round_swz.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh swz1 g2
X=$(L swz1)
chk decode_tests 120 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging -x \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_gpu_decode_pages.py
step hash_swz1 60 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_hashes.py --depths none,16
cp benchmarks/results/session34/round8/logs/hash_g2.log "$LOGS/hash_g2.log"
same_logs hash_swz1 hash_g2 "decode hashes swz1 = g2 (round 8)"
chk memcheck 60 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool memcheck --error-exitcode 1 \
  python3 scripts/gpu_smoke.py --decode-only
S="8,16384,32,8,128;32,8192,32,8,128;128,4096,32,8,128;16,16384,32,4,128"
i=0
for n in g2 swz1 swz1 g2; do
  i=$((i + 1))
  step kt${i}_$n 60 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/decode_kernel_times.py --screened-only --shapes "$S"
done
echo "== round 10 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
for f in "$LOGS"/kt*; do echo "## $(basename $f)"; grep "graphed" "$f"; done
