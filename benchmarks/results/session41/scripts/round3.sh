#!/usr/bin/env bash
# Session 41, third device call: main as landed (the window and sinks kernels, session 39's
# precheck, the decode reference's windows and sinks with the CUDA step's refusal; library m41 =
# main's build at that commit, never run as a whole), then two measurements:
#   1. every GPU test; memcheck of the whole smoke (training and decode);
#   2. the eager decode step's open question: a fresh cache's first steps, one by one, against
#      the steady step (the generate suite times 64 steps of a fresh cache per repetition);
#      the quick generate suite itself;
#   3. narrow windows (gpt-oss's 128, 256) against FlexAttention and causal;
#   4. racecheck of the whole smoke (last: the slowest).
# Carry [".ab"] (m41.so.xz, m41.commit, the SmolLM2 capture .pt.xz).
set -u
cd "$(dirname "$0")/../../../.."

mkdir -p .cache/captures && xz -dc .ab/smollm2-135m-0172c41b3d659d61.pt.xz \
  > .cache/captures/smollm2-135m-0172c41b3d659d61.pt
source notes/prepared/round_common.sh m41
M=$(L m41)
chk gpu_all 300 env FOLD_ATTENTION_LIBRARY=$M python3 -m pytest -q -m gpu -p no:logging tests/python
chk memcheck 150 env FOLD_ATTENTION_LIBRARY=$M compute-sanitizer --tool memcheck --error-exitcode 1 \
  python3 scripts/gpu_smoke.py
step eager_fresh 90 env FOLD_ATTENTION_LIBRARY=$M python3 scripts/decode_eager_step.py --fresh \
  --shapes "1,1983,9,3,64;1,4096,64,8,128" --steps 64 --rounds 3
step win_narrow 90 env FOLD_ATTENTION_LIBRARY=$M \
  FOLD_WINDOW_CASES="1,8192,64,8,64,128;4,4096,64,8,64,128;2,8192,32,8,128,128;2,8192,32,8,128,256" \
  python3 scripts/time_window.py
step generate_quick 150 env FOLD_ATTENTION_LIBRARY=$M python3 -m benchmarks.generate --quick \
  --out "$LOGS/generate"
chk racecheck 170 env FOLD_ATTENTION_LIBRARY=$M compute-sanitizer --tool racecheck --error-exitcode 1 \
  python3 scripts/gpu_smoke.py
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed" "$LOGS"/gpu_all.log | tail -2
for f in eager_fresh win_narrow generate_quick; do echo "-- $f"; grep -v "^\s*$" "$LOGS/$f.log" | tail -16; done
