#!/usr/bin/env bash
# Session 34, round 2: where the screen pays at D 64 (decode_plan.h screen_pays), re-measured
# after sessions 21-33 (the dense ring's OVERLAP, the coarse-error rule): depth 16 against every
# key read, graphed and interleaved (scripts/decode_env_ab.py --depths), on synthetic caches at
# G 1-4 and on the real model's capture (G 3, the request repeated over the batch); then main's
# decode GPU tests (library s33e = main a60042e). Carry .ab (s33e) and .cache (the capture).
#   OUT=$OUT bash benchmarks/results/session34/scripts/round2.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s33e
X=$(L s33e)
AB="env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --depths 16,none --rounds 7"
step syn_d64 240 $AB --shapes "1,8192,9,3,64;8,8192,24,8,64;32,16384,24,8,64;32,16384,32,8,64;128,4096,32,8,64;1,32768,8,8,64;8,16384,8,8,64;32,8192,16,8,64;64,4096,16,4,64"
for layer in 2 14 27; do
  step cap_l$layer 150 $AB --capture $layer --shapes "1,2048;1,8192;8,8192;32,8192;128,2048"
done
chk decode_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py
echo "== round 2 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep -v "^\.\.\." "$OUT/summary.txt" | tail -12
grep -h "^B=" "$LOGS"/syn_d64.log "$LOGS"/cap_l*.log
