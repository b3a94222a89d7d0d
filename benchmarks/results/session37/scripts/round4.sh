#!/usr/bin/env bash
# Session 37, round 4: library s37d (s37c + the plan: D 64, G <= 4, a split grid of more than
# eight blocks per SM runs split2 with SA at four blocks per SM; FOLD_DECODE_SPLIT2_OCC=3 keeps
# the register form at three, the old default). Decode GPU tests; racecheck of the occupancy bit
# test (SA at four blocks included); then the new default against the old one, graphed and
# interleaved, at grids around the threshold (1,056 blocks on 132 SMs) and on the capture.
#   OUT=$OUT bash benchmarks/results/session37/scripts/round4.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s37d
X=$(L s37d)
mkdir -p .cache/captures
for f in .ab/*.pt.xz; do [ -e "$f" ] && xz -dc "$f" > ".cache/captures/$(basename "${f%.xz}")"; done
chk decode_tests 300 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_gpu_decode_pages.py \
  tests/python/test_decode_accuracy.py
chk racecheck_occ 240 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool racecheck --error-exitcode 1 \
  python3 -m pytest -q -m gpu -p no:logging tests/python/test_gpu_decode.py -k "occupancy_same_bits and 1-"
SY="20,8192,9,3,64;24,8192,9,3,64;48,4096,9,3,64;16,16384,9,3,64;32,8192,9,3,64;128,4096,9,3,64;64,4096,16,4,64;32,16384,16,4,64"
step ab_auto_syn 200 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env FOLD_DECODE_SPLIT2_OCC \
  --values 3,- --screened-only --rounds 5 --shapes "$SY"
step ab_auto_cap 150 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env FOLD_DECODE_SPLIT2_OCC \
  --values 3,- --screened-only --rounds 5 --capture 14 --shapes "8,8192;24,8192;32,8192;64,2048;128,4096"
step ab_auto_v8 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_SCREEN=1 python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_SPLIT2_OCC --values 3,- --screened-only --v8 --rounds 5 --capture 14 \
  --shapes "8,8192;32,8192;128,4096"
echo "== round 4 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
for f in "$LOGS"/ab_*.log; do echo "-- $(basename $f)"; grep "us (" $f | sed 's/\[[^]]*\]//g'; done
grep -hE "FAILED|Error|RACECHECK" "$LOGS"/decode_tests.log "$LOGS"/racecheck_occ.log | head -20
