#!/usr/bin/env bash
# Prepared in session 35, NOT RUN: `session35/patches/decode-front-scale-late-prepared.patch`
# (`git am` on main; build it as .ab/sl1.so.xz, main's as .ab/m37.so.xz, each with its .commit;
# notes/prepared/README.md says how). In the front's 256-thread forms (SMALL at small batch, U2,
# the plain one) each sample slot's key scale stays in a register until the first q row step's
# quantisation is done and is stored into shared memory just before that step's barrier, so its
# load (which waits for the page table's) overlaps the quantisation instead of the barrier before
# it. The round 6 profile of the B8 front put 9% of its samples on that load's consumer. Same bits
# (hashes against main's). ptxas: <8,0,0> 120 -> 128 registers, <4,1,1> 162 -> 168, no new spills;
# HALF unchanged. Prediction: front -0.5 to -1 µs at B1 / B8, the captures' B1 attend -1 to -3%.
#   OUT=$OUT bash benchmarks/results/session35/scripts/next_round_scale_late.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh sl1 m37
X=$(L sl1)
chk decode_tests 150 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging -x \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_gpu_decode_pages.py
step hash_sl1 60 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_hashes.py --depths none,16
step hash_m37 60 env FOLD_ATTENTION_LIBRARY=$(L m37) python3 scripts/decode_hashes.py --depths none,16
same_logs hash_sl1 hash_m37 "decode hashes sl1 = main"
chk memcheck 60 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool memcheck --error-exitcode 1 \
  python3 scripts/gpu_smoke.py --decode-only
S="1,32768,32,8,128;1,2048,9,3,64;1,8192,9,3,64;8,16384,32,8,128;32,8192,32,8,128"
i=0
for n in m37 sl1 sl1 m37 m37 sl1; do
  i=$((i + 1))
  step kt${i}_$n 60 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/decode_kernel_times.py --screened-only --shapes "$S"
done
echo "== scale-late round checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
for f in "$LOGS"/kt*; do echo "## $(basename $f)"; grep -E "graphed|front" "$f"; done
