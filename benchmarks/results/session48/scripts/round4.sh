#!/usr/bin/env bash
# Session 48, fourth device call, from branch wip/ring-sub (carry .ab/s48b.*,
# .gpu-store/smollm2-*.pt.xz). s48b = s48a with the SUB mode's fold tail reworked (round 3: the
# last sub-split's fold ran 2 x 4 dependent L2 loads per N element and 64 per row's T on G threads):
# each fold's values loaded together, T folded per (row, warp) by its own thread. The ring tests,
# then SUB off / on graphed (decode_env_ab.py) and the kernels' own times (OVERLAP off).
#   OUT=$OUT bash benchmarks/results/session48/scripts/round4.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s48b
A=$(L s48b)
mkdir -p .cache/captures
for f in .gpu-store/*.pt.xz; do xz -dc "$f" > ".cache/captures/$(basename "${f%.xz}")"; done
nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/summary.txt"
chk ring_tests 200 env FOLD_ATTENTION_LIBRARY=$A python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py -k "ring or overlap"
AB="python3 scripts/decode_env_ab.py --env FOLD_DECODE_RING_SUB --values 0,1 --dense-only"
step ab_syn 200 env FOLD_ATTENTION_LIBRARY=$A $AB \
  --shapes "1,2048,9,3,64;1,8192,9,3,64;1,8192,32,8,128;1,32768,32,8,128;2,8192,32,8,128;8,8192,9,3,64"
step ab_cap 150 env FOLD_ATTENTION_LIBRARY=$A $AB --capture 14 --shapes "1,2048;1,8192;4,8192"
for sub in 0 1; do
  step "kt_ov0_sub${sub}" 100 env FOLD_ATTENTION_LIBRARY=$A FOLD_DECODE_OVERLAP=0 FOLD_DECODE_RING_SUB=$sub \
    python3 scripts/decode_kernel_times.py --dense-only --capture 14 --shapes "1,2048;1,8192"
done
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
cat "$OUT/summary.txt" | grep -v "^ "
for f in "$LOGS"/ab_*.log "$LOGS"/kt_*.log; do echo "-- $(basename $f)"; grep -v "Warn\|warn" $f; done
