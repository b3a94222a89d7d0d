#!/usr/bin/env bash
# Session 37, round 7: library s37g (main + the dense ring at D 64, G <= 8 with four blocks per SM
# and two stages behind FOLD_DECODE_RING_OCC=4: 56 registers, 32 bytes spilled once per item
# outside the chunk loop). The ring's schedule bit test with the knob; racecheck of the smoke with
# it (its D 64 dense caches run the new instance); then four blocks against the default (three,
# four stages), graphed and interleaved: dense D 64 synthetic, the capture, v8.
#   OUT=$OUT bash benchmarks/results/session37/scripts/round7.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s37g
X=$(L s37g)
mkdir -p .cache/captures
for f in .ab/*.pt.xz; do [ -e "$f" ] && xz -dc "$f" > ".cache/captures/$(basename "${f%.xz}")"; done
chk ring_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py -k "ring_schedule or overlap or ring_blocks"
chk racecheck_occ4 170 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_RING_OCC=4 compute-sanitizer --tool racecheck \
  --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
SY="1,8192,9,3,64;8,8192,9,3,64;32,8192,9,3,64;128,4096,9,3,64;64,4096,16,4,64;32,16384,16,2,64;16,16384,32,4,64"
step ab_r4_syn 150 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env FOLD_DECODE_RING_OCC \
  --values -,4 --dense-only --rounds 5 --shapes "$SY"
step ab_r4_cap 150 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env FOLD_DECODE_RING_OCC \
  --values -,4 --dense-only --rounds 5 --capture 14 --shapes "1,8192;8,8192;32,8192;128,4096"
step ab_r4_v8 150 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env FOLD_DECODE_RING_OCC \
  --values -,4 --dense-only --v8 --rounds 5 --shapes "32,8192,9,3,64;128,4096,9,3,64;32,16384,16,2,64"
echo "== round 7 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
for f in "$LOGS"/ab_*.log; do echo "-- $(basename $f)"; grep "us (" $f | sed 's/\[[^]]*\]//g'; done
grep -hE "passed|FAILED|SUMMARY" "$LOGS"/ring_tests.log "$LOGS"/racecheck_occ4.log | head
