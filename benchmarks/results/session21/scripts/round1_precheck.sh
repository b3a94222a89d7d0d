#!/usr/bin/env bash
# (Ran as notes/prepared/next_round_precheck.sh, from that folder: hence the cd below.)
# The next session's call for patch 0001 (the eager step's one-read precheck, notes/prepared/
# README.md), about 2 minutes. Library, xz-compressed at .ab/precheck.so.xz with its commit in
# .ab/precheck.commit: precheck = main + 0001 (git am, then the CUDA build). Carry .cache for the
# generate suite.
# The checks test (both paths, CUDA and CPU) and the decode GPU suite; memcheck / racecheck /
# synccheck of the decode smoke (its eager steps run the precheck kernel); then the eager step's
# host costs in one process (decode_eager_overhead.py: the step with the precheck against the
# torch checks, FOLD_DECODE_PRECHECK=0), the batch-1 step latency and the generate suite.
# Merge if every check passes and the eager step is faster.
#   OUT=$OUT bash notes/prepared/next_round_precheck.sh
set -u
cd "$(dirname "$0")/../.."
source notes/prepared/round_common.sh precheck
X=$(L precheck)
chk checks 120 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m "gpu or not gpu" -p no:logging \
  tests/python/test_decode_step_checks.py tests/python/test_gpu_decode.py tests/python/test_decode_planner.py
for tool in memcheck racecheck synccheck; do
  chk ${tool} 90 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool $tool --error-exitcode 1 \
    python3 scripts/gpu_smoke.py --decode-only
done
step eager 120 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_eager_overhead.py
cat "$LOGS/eager.log" >> "$OUT/summary.txt"
step step_latency 100 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_step_latency.py
cat "$LOGS/step_latency.log" >> "$OUT/summary.txt"
step gen 150 env FOLD_ATTENTION_LIBRARY=$X python3 -m benchmarks.generate --quick --budget-s 60 \
  --no-repo-results --out "$OUT/gen"
mkdir -p "$OUT/protocol" && find "$OUT/gen" -name '*.jsonl' -exec cp {} "$OUT/protocol/" \;
rm -rf "$OUT/gen"
# (Information for the planner, decode_plan.h screen_pays: v8 keeps the screen everywhere,
# unmeasured. Depth 16 against every key read, v8 caches.)
step v8_depth_ab 120 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py \
  --depths "16,none" --v8 --rounds 5 \
  --shapes "32,8192,32,8,128;16,16384,32,4,128;32,32768,32,2,128;32,16384,16,2,64;1,8192,9,3,64"
cat "$LOGS/v8_depth_ab.log" >> "$OUT/summary.txt"
echo "== precheck checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
