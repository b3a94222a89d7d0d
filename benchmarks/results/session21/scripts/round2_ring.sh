#!/usr/bin/env bash
# Session 21, round 2: the dense ring's whole-chunk form and stage count, and v8 in the planner
# (library `ring`, wip/ring21; `main` = main's kernels): decode GPU tests; the output / LSE hashes
# of main's and ring's libraries (and ring's with 3 / 4 stages and without the whole-chunk form)
# compared; the sanitizers with ring (2 fetching blocks, and 3 stages); graphed interleaved A/B of
# the whole-chunk form and of the stage count inside ring's library; per-kernel times of both.
#   OUT=$OUT bash benchmarks/results/session21/scripts/round2_ring.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh main ring
M=$(L main); R=$(L ring)
chk checks 200 env FOLD_ATTENTION_LIBRARY=$R python3 -m pytest -q -m "gpu or not gpu" -p no:logging \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_decode_step_checks.py
H="python3 scripts/decode_hashes.py --depths none,16"
step h_main 120 env FOLD_ATTENTION_LIBRARY=$M $H
step h_ring 120 env FOLD_ATTENTION_LIBRARY=$R $H
step h_ring3 120 env FOLD_ATTENTION_LIBRARY=$R FOLD_DECODE_RING_STAGES=3 $H
step h_ring4 120 env FOLD_ATTENTION_LIBRARY=$R FOLD_DECODE_RING_STAGES=4 $H
step h_full0 120 env FOLD_ATTENTION_LIBRARY=$R FOLD_DECODE_RING_FULL=0 $H
for v in ring ring3 ring4 full0; do
  if diff -q "$LOGS/h_main.log" "$LOGS/h_$v.log" > /dev/null; then echo "== hashes $v = main" >> "$OUT/summary.txt";
  else echo "== hashes $v DIFFER from main" >> "$OUT/summary.txt"; fail=1; diff "$LOGS/h_main.log" "$LOGS/h_$v.log" >> "$OUT/summary.txt"; fi
done
for tool in racecheck memcheck synccheck; do
  chk ${tool} 120 env FOLD_ATTENTION_LIBRARY=$R FOLD_DECODE_RING_BLOCKS=2 compute-sanitizer --tool $tool \
    --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
done
chk racecheck3 120 env FOLD_ATTENTION_LIBRARY=$R FOLD_DECODE_RING_BLOCKS=2 FOLD_DECODE_RING_STAGES=3 \
  compute-sanitizer --tool racecheck --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
S="1,32768,32,8,128;8,16384,32,8,128;32,8192,32,8,128;128,4096,32,8,128;1,8192,9,3,64;32,16384,16,2,64"
step full_ab 200 env FOLD_ATTENTION_LIBRARY=$R python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_RING_FULL --values "0,-" --dense-only --rounds 7 --shapes "$S"
cat "$LOGS/full_ab.log" >> "$OUT/summary.txt"
step stages_ab 240 env FOLD_ATTENTION_LIBRARY=$R python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_RING_STAGES --values "-,3,4" --dense-only --rounds 7 --shapes "$S"
cat "$LOGS/stages_ab.log" >> "$OUT/summary.txt"
step kt_main 120 env FOLD_ATTENTION_LIBRARY=$M python3 scripts/decode_kernel_times.py --dense-only --shapes "$S"
step kt_ring 120 env FOLD_ATTENTION_LIBRARY=$R python3 scripts/decode_kernel_times.py --dense-only --shapes "$S"
# ncu of ring's dense ring at B128 L4K and B1 L32K (one launch each: stalls, DRAM, issue).
for c in "b128 128,4096,32,8,128" "b1 1,32768,32,8,128"; do
  set -- $c
  step ncu_$1 200 env FOLD_ATTENTION_LIBRARY=$R ncu --set full --import-source yes \
    --kernel-name "regex:decode_split_ring" --launch-skip 2 --launch-count 1 -f -o "$OUT/ring_$1" \
    python3 scripts/decode_kernel_times.py --dense-only --shapes "$2"
  ncu -i "$OUT/ring_$1.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip > "$OUT/ring_$1.src.csv.gz"
  ncu -i "$OUT/ring_$1.ncu-rep" --page details --csv > "$OUT/ring_$1.details.csv" 2>/dev/null
  python3 scripts/ncu_stalls.py "$OUT/ring_$1.src.csv.gz" 30 > "$OUT/ring_$1.stalls.txt" 2>&1
  rm -f "$OUT/ring_$1.ncu-rep"
  head -14 "$OUT/ring_$1.stalls.txt" >> "$OUT/summary.txt"
done
echo "== round 2 checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
