#!/usr/bin/env bash
# Session 22, round 1: session 21's host changes that had not run on a GPU (library main =
# e615dbd): 4 ring stages at D 64 only where the fetch table fits (time B512 L4K D 64 G 4 and two
# other D 64 shapes, stages default / 2 / 4), the decode GPU tests, the sanitizers of the decode
# smoke (which gained a screened v8 cache), the training GPU tests (the forward's chunk rule now
# needs >= 16 query blocks) and the training smoke under memcheck.
#   OUT=$OUT bash benchmarks/results/session22/scripts/round1_verify.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh main
M=$(L main)
chk checks 240 env FOLD_ATTENTION_LIBRARY=$M python3 -m pytest -q -m "gpu or not gpu" -p no:logging \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_decode_step_checks.py
for tool in racecheck memcheck synccheck; do
  chk ${tool} 150 env FOLD_ATTENTION_LIBRARY=$M FOLD_DECODE_RING_BLOCKS=2 compute-sanitizer --tool $tool \
    --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
done
S="512,4096,16,4,64;256,4096,32,8,64;32,16384,16,4,64;1,8192,9,3,64"
step stages_ab 200 env FOLD_ATTENTION_LIBRARY=$M python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_RING_STAGES --values "-,2,4" --dense-only --rounds 7 --shapes "$S"
cat "$LOGS/stages_ab.log" >> "$OUT/summary.txt"
chk training 300 env FOLD_ATTENTION_LIBRARY=$M python3 -m pytest -q -m "gpu or not gpu" -p no:logging \
  tests/python/test_gpu_training.py
echo "== round 1 checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
