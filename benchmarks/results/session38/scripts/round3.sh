#!/usr/bin/env bash
# Session 38, round 3: library s38c (split3 rewritten: 16 or 32 warps, two or four per chunk; a thread or two per key for the
# gathers; the sums in the last warp; opt-in FOLD_DECODE_SPLIT3=1). Bit tests against split2; the decode GPU suite with
# split3 forced; racecheck / memcheck of the decode smoke with it (D 64 G 3 and the guard's G 2
# caches run it); per-kernel times on the SmolLM2 capture; graphed, interleaved A/B against split2
# on the capture (layers 14 and 2) and on synthetic D 64 G 3 / 4 caches.
#   OUT=$OUT bash benchmarks/results/session38/scripts/round3.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s38c
X=$(L s38c)
mkdir -p .cache/captures
for f in .ab/*.pt.xz; do [ -e "$f" ] && xz -dc "$f" > ".cache/captures/$(basename "${f%.xz}")"; done
chk split3_tests 150 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py -k "split3 or split2_same_bits"
chk decode_tests_s3 200 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_SPLIT3=1 python3 -m pytest -q -m gpu \
  -p no:logging tests/python/test_gpu_decode.py tests/python/test_decode_planner.py \
  tests/python/test_gpu_decode_pages.py tests/python/test_decode_accuracy.py
chk racecheck 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_SPLIT3=1 compute-sanitizer --tool racecheck \
  --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
chk racecheck32 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_SPLIT3=1 FOLD_DECODE_SPLIT3_WARPS=32 \
  compute-sanitizer --tool racecheck --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
chk memcheck 60 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_SPLIT3=1 compute-sanitizer --tool memcheck \
  --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
for v in 0 1; do
  step kt_cap_s3_$v 60 env FOLD_DECODE_SPLIT3_WARPS=32 FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_SPLIT3=$v python3 scripts/decode_kernel_times.py \
    --screened-only --capture 14 --shapes "1,2048;1,8192;8,8192"
done
CS="1,2048;1,8192;2,8192;4,8192;8,8192;32,8192"
SY="1,8192,9,3,64;1,32768,16,4,64;2,16384,32,8,64;4,8192,9,3,64;8,8192,9,3,64;32,8192,9,3,64"
for w in 16 32; do
  step ab_w${w}_cap14 100 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_SPLIT3_WARPS=$w python3 scripts/decode_env_ab.py \
    --env FOLD_DECODE_SPLIT3 --values 0,1 --screened-only --rounds 5 --capture 14 --shapes "$CS"
done
step ab_w32_cap2 100 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_SPLIT3_WARPS=32 python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_SPLIT3 --values 0,1 --screened-only --rounds 5 --capture 2 --shapes "$CS"
step ab_w32_syn 100 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_SPLIT3_WARPS=32 python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_SPLIT3 --values 0,1 --screened-only --rounds 5 --shapes "$SY"
echo "== round 3 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
for f in "$LOGS"/ab_*.log "$LOGS"/kt_*.log; do echo "-- $(basename $f)"; grep -E "us \(|µs|split" $f | sed 's/\[[^]]*\]//g' | head -30; done
grep -hE "passed|failed|FAILED|Error|SUMMARY" "$LOGS"/split3_tests.log "$LOGS"/decode_tests_s3.log "$LOGS"/racecheck.log "$LOGS"/racecheck32.log "$LOGS"/memcheck.log | head -30
