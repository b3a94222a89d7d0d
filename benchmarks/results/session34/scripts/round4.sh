#!/usr/bin/env bash
# Session 34, round 4: library wis1 (branch wis: the dense ring's operand weights in the chunk's
# stage, one block barrier per chunk; FOLD_DECODE_RING_WIS=0 keeps the old buffer) against s33e
# (= main a60042e). Checks: the decode GPU tests, decode hashes wis1 (on and off) against main's,
# racecheck / memcheck / synccheck of the decode smoke; then the A/B of the knob (dense).
#   OUT=$OUT bash benchmarks/results/session34/scripts/round4.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh wis1 s33e
X=$(L wis1)
chk decode_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_gpu_decode_pages.py
step hash_wis 150 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_hashes.py --depths none,16
step hash_wis0 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_RING_WIS=0 python3 scripts/decode_hashes.py --depths none,16
step hash_main 150 env FOLD_ATTENTION_LIBRARY=$(L s33e) python3 scripts/decode_hashes.py --depths none,16
same_logs hash_wis hash_main "decode hashes wis1 = main"
same_logs hash_wis0 hash_main "decode hashes wis1 WIS=0 = main"
for tool in racecheck memcheck synccheck; do
  chk $tool 150 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool $tool --error-exitcode 1 \
    python3 scripts/gpu_smoke.py --decode-only
done
step wis_ab 240 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env FOLD_DECODE_RING_WIS \
  --values "-,0" --rounds 9 --dense-only --shapes "8,8192,9,3,64;1,8192,9,3,64;64,4096,16,4,64;32,16384,32,8,64;1,32768,32,8,128;8,16384,32,8,128;128,4096,32,8,128;16,16384,32,4,128;32,32768,32,2,128"
echo "== round 4 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep -v "^\.\.\." "$OUT/summary.txt" | tail -40
grep -h "^B=" "$LOGS"/wis_ab.log
