#!/usr/bin/env bash
# Session 37, round 3: library s37c (s37b + split2 instances at four blocks per SM for D 64,
# G <= 4, picked only by FOLD_DECODE_SPLIT2_OCC=4, registers or SA; 64 registers, no spills but
# the v8 register form's 16 bytes). The occupancy bit test; then, graphed and interleaved, four
# blocks against the default three at D 64 G 3 / 4 (the real model's shape): synthetic caches,
# the SmolLM2 capture (layer 14 repeated over the batch), bf16 V and v8 (screen kept).
#   OUT=$OUT bash benchmarks/results/session37/scripts/round3.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s37c
X=$(L s37c)
mkdir -p .cache/captures
for f in .ab/*.pt.xz; do [ -e "$f" ] && xz -dc "$f" > ".cache/captures/$(basename "${f%.xz}")"; done
chk occ_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py -k "occupancy or split2"
SY="1,8192,9,3,64;8,8192,9,3,64;32,8192,9,3,64;32,16384,16,4,64;64,4096,16,4,64;128,4096,9,3,64"
CS="1,2048;1,8192;8,8192;32,8192;64,2048;128,4096"
step ab_occ_syn 150 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env FOLD_DECODE_SPLIT2_OCC \
  --values -,4 --screened-only --rounds 5 --shapes "$SY"
step ab_occ_cap 150 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env FOLD_DECODE_SPLIT2_OCC \
  --values -,4 --screened-only --rounds 5 --capture 14 --shapes "$CS"
step ab_occ_sa_cap 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_SPLIT2_SA=1 python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_SPLIT2_OCC --values -,4 --screened-only --rounds 5 --capture 14 --shapes "$CS"
step ab_occ_sa_syn 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_SPLIT2_SA=1 python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_SPLIT2_OCC --values -,4 --screened-only --rounds 5 --shapes "$SY"
step ab_occ_v8_cap 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_SCREEN=1 python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_SPLIT2_OCC --values -,4 --screened-only --v8 --rounds 5 --capture 14 --shapes "$CS"
echo "== round 3 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
for f in "$LOGS"/ab_*.log; do echo "-- $(basename $f)"; grep "us (" $f | sed 's/\[[^]]*\]//g'; done
grep -hE "FAILED|Error" "$LOGS"/occ_tests.log | head -20
