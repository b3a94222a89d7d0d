#!/usr/bin/env bash
# Session 36, round 2: the v8 dense ring (v8r1: main + the ring's v8 instances, V's E4M3 planes
# widened to bf16 A fragments in registers; FOLD_DECODE_V8_RING=0 keeps the plain split's fma path)
# against main's library (m40). Tests (the v8 ring within one rounding of the CPU, its schedule
# knobs bit for bit), hashes of the bf16 / fp16 paths against main's, the sanitizers on the smoke
# (two v8 dense caches: D 64 G 8, D 128 G 12), then v8 dense ring against the fma path, graphed.
#   OUT=$OUT bash benchmarks/results/session36/scripts/round2.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh v8r1 m40
X=$(L v8r1)
chk decode_tests 300 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging -x \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_gpu_decode_pages.py \
  tests/python/test_decode_accuracy.py
step hash_v8r1 60 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_hashes.py --depths none,16
step hash_m40 60 env FOLD_ATTENTION_LIBRARY=$(L m40) python3 scripts/decode_hashes.py --depths none,16
same_logs hash_v8r1 hash_m40 "decode hashes v8r1 = main"
for tool in racecheck memcheck; do
  chk $tool 170 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool $tool --error-exitcode 1 \
    python3 scripts/gpu_smoke.py --decode-only
done
step ab_v8 150 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env FOLD_DECODE_V8_RING \
  --values 0,- --v8 --dense-only --rounds 5 \
  --shapes "1,32768,32,8,128;8,16384,32,8,128;128,4096,32,8,128;32,32768,32,2,128;32,16384,32,4,64;1,8192,9,3,64"
echo "== round 2 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -h "us (" "$LOGS"/ab_*.log
grep -hE "FAILED|Error|error" "$LOGS"/decode_tests.log | head -20
