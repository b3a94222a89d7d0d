#!/usr/bin/env bash
# Session 23, round 5 (library `front`: main + the decode front in 128-thread blocks where a
# group has <= 4 rows and the groups fill the GPU, opt-in FOLD_DECODE_FRONT_THREADS=128): decode
# GPU tests with the default and with 128 for the whole run (new: 128 = 256 bit for bit, bad value
# refused), memcheck / racecheck of that test, per-kernel times, graphed interleaved A/Bs (dense
# and depth 16).
#   OUT=$OUT bash benchmarks/results/session23/scripts/round5_front.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh front
X=$(L front)
T="tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_decode_step_checks.py"
chk tests 150 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m "gpu or not gpu" -p no:logging $T
chk tests_128 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_FRONT_THREADS=128 python3 -m pytest -q \
  -m "gpu or not gpu" -p no:logging $T
for tool in memcheck racecheck; do
  chk ${tool} 150 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool $tool --error-exitcode 1 \
    python3 -m pytest -q -p no:logging tests/python/test_gpu_decode.py -k "front_threads and bf16"
done
S="128,4096,32,8,128;32,8192,32,8,128;64,4096,16,4,64;256,4096,32,8,64"
step kt_256 100 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_kernel_times.py --dense-only --shapes "$S"
step kt_128 100 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_FRONT_THREADS=128 python3 scripts/decode_kernel_times.py --dense-only --shapes "$S"
for k in kt_256 kt_128; do echo "== $k" >> "$OUT/summary.txt"; grep -E "^B=|front" "$LOGS/$k.log" >> "$OUT/summary.txt"; done
step ab_dense 150 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_FRONT_THREADS --values "-,128" --dense-only --rounds 7 --shapes "$S"
cat "$LOGS/ab_dense.log" >> "$OUT/summary.txt"
step ab_d16 150 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_FRONT_THREADS --values "-,128" --rounds 7 --shapes "128,4096,32,8,128;32,8192,32,8,128"
cat "$LOGS/ab_d16.log" >> "$OUT/summary.txt"
echo "== round 5 checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
