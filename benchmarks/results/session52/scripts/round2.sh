#!/usr/bin/env bash
# Session 52's second call: main as merged (s52m: PIPE on at small grids, the L2 prefetch off by
# default), carrying .ab/s52m.so.xz and .ab/s52m.commit (notes/prepared/build_ab.sh s52m):
#   OUT=$OUT bash benchmarks/results/session52/scripts/round2.sh
# 1. the decode GPU files on the merged default; 2. B1 kernel times at the default, and own times
# (OVERLAP 0) with PIPE forced 0 / 1 (round 1 timed own times only with the prefetch on); 3. ncu of
# split2 at B1 H 9/3 D 64 L 2K depth 16, PIPE 0 and 1: where a step's time goes (round 1: PIPE took
# 0.4-0.9 us off split2's own time where ~5 was predicted, so the step chain is not only the
# gathers' round trip).
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s52m
P=$(L s52m)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/summary.txt"
chk gpu_decode 220 env FOLD_ATTENTION_LIBRARY=$P python3 -m pytest -q -m gpu -p no:logging -x \
  tests/python/test_gpu_decode*.py tests/python/test_gpu_sinks.py
S="1,512,9,3,64;1,2048,9,3,64;1,8192,9,3,64;1,4096,32,8,128;1,16384,32,8,128;4,4096,32,8,128"
step kt_default 90 env FOLD_ATTENTION_LIBRARY=$P python3 scripts/decode_kernel_times.py --shapes "$S"
for p in 0 1; do
  step kt_own_pipe$p 90 env FOLD_ATTENTION_LIBRARY=$P FOLD_DECODE_OVERLAP=0 FOLD_DECODE_SPLIT2_PIPE=$p \
    python3 scripts/decode_kernel_times.py --screened-only --shapes "$S"
done
for p in 1 0; do
  step ncu_pipe$p 150 env FOLD_ATTENTION_LIBRARY=$P FOLD_DECODE_SPLIT2_PIPE=$p ncu --set full \
    --import-source yes --kernel-name "regex:decode_split2" --launch-skip 2 --launch-count 1 -f \
    -o "$OUT/split2_pipe$p" python3 scripts/decode_kernel_times.py --screened-only --shapes "1,2048,9,3,64"
  ncu -i "$OUT/split2_pipe$p.ncu-rep" --page source --csv --print-source sass 2>/dev/null |
    gzip > "$OUT/split2_pipe$p.src.csv.gz"
  ncu -i "$OUT/split2_pipe$p.ncu-rep" --page details --csv > "$OUT/split2_pipe$p.details.csv" 2>/dev/null
  python3 scripts/ncu_stalls.py "$OUT/split2_pipe$p.src.csv.gz" 30 > "$OUT/split2_pipe$p.stalls.txt" 2>&1
  rm -f "$OUT/split2_pipe$p.ncu-rep"
  head -24 "$OUT/split2_pipe$p.stalls.txt" >> "$OUT/summary.txt"
  tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
done
grep -hE "passed|failed" "$LOGS"/gpu_decode.log
for f in "$LOGS"/kt_*.log; do echo "-- $(basename $f)"; grep -E "graphed|split2|ring|front" $f; done
exit $fail
