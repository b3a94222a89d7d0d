#!/usr/bin/env bash
# Session 34, round 5: library fma1 (branch fma: exp2_fp's Horner steps fused, host and device;
# every decode bit moves with the CPU reference) against s33e (= main a60042e). Checks: every
# decode GPU test (GPU against the CPU reference: both changed alike), memcheck of the decode
# smoke; then the graphed attend and per-kernel times, libraries alternated three times each.
#   OUT=$OUT bash benchmarks/results/session34/scripts/round5.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh fma1 s33e
X=$(L fma1)
chk decode_tests 240 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_gpu_decode_pages.py
chk memcheck 150 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool memcheck --error-exitcode 1 \
  python3 scripts/gpu_smoke.py --decode-only
S="1,32768,32,8,128;8,16384,32,8,128;128,4096,32,8,128;32,32768,32,2,128;1,8192,9,3,64;32,16384,32,8,64"
i=0
for n in s33e fma1 fma1 s33e s33e fma1; do
  i=$((i + 1))
  step kt${i}_$n 150 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/decode_kernel_times.py --shapes "$S"
done
echo "== round 5 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep -v "^\.\.\." "$OUT/summary.txt" | grep "^==" 
for f in "$LOGS"/kt*; do echo "## $(basename $f)"; grep -i "graphed\|^B=\|shape" "$f" | head -20; done
