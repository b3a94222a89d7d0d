#!/usr/bin/env bash
# Session 34, round 7: library g1 (branch gather: split2's value gathers by rows) against fma1
# (= main c2d07f0's kernels). Checks: the decode GPU tests, decode hashes against fma1's (the same
# copies: the same bits), racecheck / memcheck of the decode smoke; then the graphed attend,
# libraries alternated three times each (screened shapes: split2).
#   OUT=$OUT bash benchmarks/results/session34/scripts/round7.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh g1 fma1
X=$(L g1)
chk decode_tests 240 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_gpu_decode_pages.py
for n in g1 fma1; do
  step hash_$n 150 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/decode_hashes.py --depths none,16
done
same_logs hash_g1 hash_fma1 "decode hashes g1 = fma1"
for tool in racecheck memcheck; do
  chk $tool 150 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool $tool --error-exitcode 1 \
    python3 scripts/gpu_smoke.py --decode-only
done
S="1,32768,32,8,128;8,16384,32,8,128;32,8192,32,8,128;128,4096,32,8,128;16,16384,32,4,128;1,8192,9,3,64;32,16384,32,8,64"
i=0
for n in fma1 g1 g1 fma1 fma1 g1; do
  i=$((i + 1))
  step kt${i}_$n 150 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/decode_kernel_times.py --screened-only --shapes "$S"
done
echo "== round 7 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
for f in "$LOGS"/kt*; do echo "## $(basename $f)"; grep "graphed" "$f"; done
