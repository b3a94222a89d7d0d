#!/usr/bin/env bash
# Prepared at the end of session 41 (device budget spent): the next session's first call.
# Library m42 = main at the session's end (the CUDA decode windows and sinks included).
# Carry [".ab"] holding m42.so.xz, m42.commit and the SmolLM2 capture .pt.xz only (the tree and
# the carry must stay under 64 MiB; .gpu-store/ keeps the rest).
#   1. windowed decode steps timed (graphed): plain, window, window + sinks, SDPA over the window;
#   2. the narrow training windows' kernel split (is the ~0.45 ms floor host or device time?);
#   3. round4's question: the generate suite's slow first layers, reversed order; the eager
#      step's host profile.
set -u
cd "$(dirname "$0")/../../../.."
mkdir -p .cache/captures && xz -dc .ab/smollm2-135m-0172c41b3d659d61.pt.xz \
  > .cache/captures/smollm2-135m-0172c41b3d659d61.pt
source notes/prepared/round_common.sh m42
M=$(L m42)
step dec_window 120 env FOLD_ATTENTION_LIBRARY=$M python3 scripts/time_decode_window.py
step win_kernels 90 env FOLD_ATTENTION_LIBRARY=$M \
  FOLD_WINDOW_CASES="1,8192,64,8,64,128;2,8192,32,8,128,128;2,8192,32,8,128,4096" \
  python3 scripts/time_window.py --kernels
step gen_reversed 90 env FOLD_ATTENTION_LIBRARY=$M FOLD_GENERATE_LAYERS=27,14,2 \
  python3 -m benchmarks.generate --quick --out "$LOGS/gen_reversed"
step eager_profile 60 env FOLD_ATTENTION_LIBRARY=$M python3 scripts/decode_eager_step.py --profile \
  --shapes "1,1983,9,3,64" --steps 64 --rounds 3
step gpu_tests_refactored 150 env FOLD_ATTENTION_LIBRARY=$M python3 -m pytest -q -m gpu \
  tests/python/test_gpu_window.py tests/python/test_gpu_sinks.py
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
cat "$LOGS/dec_window.log" "$LOGS/win_kernels.log"
python3 - "$LOGS/gen_reversed/benchmarks/results/generate.jsonl" <<'PY'
import json, sys
try:
    for line in open(sys.argv[1]):
        r = json.loads(line)
        if "arms" in r:
            print(r["case"], {n: round(a.get("us_per_step", -1), 1) for n, a in r["arms"].items()})
except OSError as e:
    print(e)
PY
tail -24 "$LOGS/eager_profile.log"
tail -5 "$LOGS/gpu_tests_refactored.log"
