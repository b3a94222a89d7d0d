#!/usr/bin/env bash
# Session 37, round 1: library s37a (main + v8's screened split2: the value product of v8 caches
# on the tensor cores, plane B of V gathered only for v-refined keys; FOLD_DECODE_V8_SPLIT2=0
# keeps split_item's fma product). Every bf16 / fp16 kernel's SASS is byte-identical to main's
# (checked on the build machine), so only v8 steps with the screen kept can change.
# Decode GPU tests; racecheck / memcheck of the smoke (its v8 D 128 G 4 cache keeps the screen
# by FOLD_DECODE_SCREEN=1: now split2's v8 instance); then, graphed and interleaved, v8 at depth
# 16: the screen kept (split2) against the default (the planner's dense ring), split2 against
# the fma split, and the same on the real capture's layer repeated over a batch.
#   OUT=$OUT bash benchmarks/results/session37/scripts/round1.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s37a
X=$(L s37a)
mkdir -p .cache/captures
for f in .ab/*.pt.xz; do [ -e "$f" ] && xz -dc "$f" > ".cache/captures/$(basename "${f%.xz}")"; done
chk decode_tests 300 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_gpu_decode_pages.py \
  tests/python/test_decode_accuracy.py
for tool in racecheck memcheck; do
  chk $tool 170 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool $tool --error-exitcode 1 \
    python3 scripts/gpu_smoke.py --decode-only
done
S7="1,32768,32,8,128;8,16384,32,8,128;32,8192,32,8,128;128,4096,32,8,128;16,16384,32,4,128;32,32768,32,2,128;1,8192,9,3,64;32,8192,9,3,64"
step ab_screen 150 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env FOLD_DECODE_SCREEN \
  --values -,1 --v8 --screened-only --rounds 5 --shapes "$S7"
step ab_fma 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_SCREEN=1 python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_V8_SPLIT2 --values 0,- --v8 --screened-only --rounds 5 --shapes "$S7"
step ab_bf16 150 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env FOLD_DECODE_SCREEN \
  --values -,1 --screened-only --rounds 5 --shapes "$S7"
for layer in 2 14; do
  step ab_cap$layer 150 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env FOLD_DECODE_SCREEN \
    --values -,1 --v8 --screened-only --rounds 5 --capture $layer --shapes "1,8192;8,8192;32,8192;64,2048"
done
echo "== round 1 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -h "us (" "$LOGS"/ab_*.log
grep -hE "FAILED|Error|error" "$LOGS"/decode_tests.log | head -20
