#!/usr/bin/env bash
# Session 37, round 2: library s37b (round 1's s37a with the new test's LSE compared within
# 1e-5; the same device code). Every GPU test of the suite; then where the real model's steps go:
# per-kernel times on the SmolLM2 capture (layer 14 repeated over the batch) for bf16 V at depth
# None / 16 and for v8 with the screen kept (split2) and dense; and the bf16 depth 16 / None A/B
# on two layers of the capture (the planner keeps bf16's screen at D 64 G 3 for this case).
#   OUT=$OUT bash benchmarks/results/session37/scripts/round2.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s37b
X=$(L s37b)
mkdir -p .cache/captures
for f in .ab/*.pt.xz; do [ -e "$f" ] && xz -dc "$f" > ".cache/captures/$(basename "${f%.xz}")"; done
chk gpu_suite 330 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging tests/python
CS="1,2048;1,8192;8,8192;32,8192;64,2048"
step kt_bf16 120 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_kernel_times.py --capture 14 --shapes "$CS"
step kt_v8s 120 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_SCREEN=1 python3 scripts/decode_kernel_times.py \
  --capture 14 --v8 --screened-only --shapes "$CS"
for layer in 2 14; do
  step ab_cap_bf16_$layer 150 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py \
    --depths 16,none --rounds 5 --capture $layer --shapes "1,2048;1,8192;8,8192;32,8192;64,2048"
done
echo "== round 2 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -h "us (" "$LOGS"/ab_*.log
cat "$LOGS"/kt_*.log | grep -v "^\s*$" | head -120
grep -hE "FAILED|Error" "$LOGS"/gpu_suite.log | head -20
