#!/usr/bin/env bash
# Session 48, second device call, from branch wip/ring-sub (carry .ab/s48a.*,
# .gpu-store/smollm2-*.pt.xz). s48a: the dense ring's 128-key sub-split folds at G <= 8 and its
# SUB mode (one sub-split per block on small grids, the last folds). Tests: the ring / overlap
# GPU tests (the new sub-vs-whole-split bit test among them), the whole GPU suite, memcheck and
# racecheck of the decode smoke with SUB forced on. Timings: SUB off / on, graphed and interleaved
# (decode_env_ab.py), on synthetic shapes and the SmolLM2 capture's layer 14.
#   OUT=$OUT bash benchmarks/results/session48/scripts/round2.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s48a
A=$(L s48a)
mkdir -p .cache/captures
for f in .gpu-store/*.pt.xz; do xz -dc "$f" > ".cache/captures/$(basename "${f%.xz}")"; done
nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/summary.txt"
chk ring_tests 200 env FOLD_ATTENTION_LIBRARY=$A python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py -k "ring or overlap"
chk gpu_all 330 env FOLD_ATTENTION_LIBRARY=$A python3 -m pytest -q -m gpu -p no:logging tests/python
chk memcheck 150 env FOLD_ATTENTION_LIBRARY=$A FOLD_DECODE_RING_SUB=1 compute-sanitizer --tool memcheck \
  --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
chk racecheck 150 env FOLD_ATTENTION_LIBRARY=$A FOLD_DECODE_RING_SUB=1 compute-sanitizer --tool racecheck \
  --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
AB="python3 scripts/decode_env_ab.py --env FOLD_DECODE_RING_SUB --values 0,1 --dense-only"
step ab_syn 200 env FOLD_ATTENTION_LIBRARY=$A $AB \
  --shapes "1,2048,9,3,64;1,8192,9,3,64;1,8192,32,8,128;1,32768,32,8,128;2,8192,32,8,128;4,8192,32,8,128;8,8192,9,3,64"
step ab_cap 150 env FOLD_ATTENTION_LIBRARY=$A $AB --capture 14 --shapes "1,2048;1,8192;2,8192;4,8192;8,8192"
step ab_cap_spare 100 env FOLD_ATTENTION_LIBRARY=$A $AB --capture 14 --spare 4 --shapes "1,2048;1,8192"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
cat "$OUT/summary.txt"
