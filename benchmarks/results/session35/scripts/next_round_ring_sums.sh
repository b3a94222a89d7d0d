#!/usr/bin/env bash
# Prepared in session 35, NOT RUN: `session35/patches/decode-ring-rowsums-registers-prepared.patch`
# (`git am` on main; build it as .ab/rs1.so.xz, main's as .ab/m37.so.xz, each with its .commit;
# notes/prepared/README.md says how). The dense ring at G 9-16 (RBM 2) keeps its warps' row sums
# (T, T_lse) in registers over an item's chunks, as G <= 8 already did, instead of a shared-memory
# read-add-write per chunk and row block; the same additions in the same order, so the same bits
# (hashes against main's; the RBM 1 / 4 / 8 instances' SASS is main's). ncu of the G 16 ring
# (session 34, round 3) put ~7% of its stall samples on those adds (short scoreboard after the
# shared loads). 72 registers, no spills. Prediction: G 16 dense ring -1 to -3%.
#   OUT=$OUT bash benchmarks/results/session35/scripts/next_round_ring_sums.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh rs1 m37
X=$(L rs1)
chk decode_tests 150 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging -x \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_gpu_decode_pages.py
step hash_rs1 60 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_hashes.py --depths none,16
step hash_m37 60 env FOLD_ATTENTION_LIBRARY=$(L m37) python3 scripts/decode_hashes.py --depths none,16
same_logs hash_rs1 hash_m37 "decode hashes rs1 = main"
for tool in racecheck memcheck; do
  chk $tool 120 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool $tool --error-exitcode 1 \
    python3 scripts/gpu_smoke.py --decode-only
done
S="32,32768,32,2,128;32,16384,32,2,64;16,16384,24,2,128"
i=0
for n in m37 rs1 rs1 m37 m37 rs1; do
  i=$((i + 1))
  step kt${i}_$n 60 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/decode_kernel_times.py --dense-only --shapes "$S"
done
echo "== ring-sums round checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
for f in "$LOGS"/kt*; do echo "## $(basename $f)"; grep -E "graphed|ring" "$f"; done
