#!/usr/bin/env bash
# Session 26, round 2 (library `e1`: v1.2's epilogue through shared memory and a TMA store per
# warp, FOLD_FWD_EPI=tma the default at D <= 128, "stg" the 4-byte stores, "stg2" those with the
# TMA form's K / V stage count, "shf" 16-byte stores after a quad transpose): the training GPU
# tests (with the new bit test tma = stg = stg2 = shf),
# racecheck / memcheck of the training smoke, the forward protocol A/B twice (two processes), and
# ncu of the new D 128 kernel at (16, 1024, 32/8, 128) non-causal (session 25 round 2's sections,
# and round 5's source-level stalls).
#   OUT=$OUT bash benchmarks/results/session26/scripts/round2_epi.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh e1
X=$(L e1)
chk train_tests 240 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py
for c in "racecheck 1" "racecheck 3" "memcheck 2"; do
  set -- $c
  chk ${1}_$2 120 env FOLD_ATTENTION_LIBRARY=$X FOLD_FWD_CTAS=$2 \
    compute-sanitizer --tool $1 --error-exitcode 1 python3 scripts/gpu_smoke.py --training-only
done
for n in 1 2; do
  step fwd_ab$n 300 env FOLD_ATTENTION_LIBRARY=$X FOLD_BENCH_VARIANTS=FOLD_FWD_EPI=stg,FOLD_FWD_EPI=stg2,FOLD_FWD_EPI=shf \
    python3 -m benchmarks.forward --shapes issue --masks both --flex none --rounds 6 --budget-s 240 \
    --out "$OUT/fab" --no-repo-results
  find "$OUT/fab" -name '*.jsonl' -exec cp {} "$OUT/ab_forward$n.jsonl" \; 2>/dev/null
  python3 scripts/ab_table.py "$OUT/ab_forward$n.jsonl" > "$OUT/ab_forward$n.txt" 2>&1
  rm -rf "$OUT/fab"
done
SEC="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section InstructionStats --section SchedulerStats --section Occupancy --print-details all"
step ncu_fold_d128 120 env FOLD_ATTENTION_LIBRARY=$X ncu --clock-control none --kernel-name regex:forward_v1 \
  --launch-skip 1 --launch-count 1 $SEC python3 scripts/profile_forward.py 16 1024 32 8 128 0
step ncu_shf_d128 120 env FOLD_ATTENTION_LIBRARY=$X FOLD_FWD_EPI=shf ncu --clock-control none \
  --kernel-name regex:forward_v1 --launch-skip 1 --launch-count 1 $SEC python3 scripts/profile_forward.py 16 1024 32 8 128 0
step ncu_src_d128 200 env FOLD_ATTENTION_LIBRARY=$X ncu --kernel-name regex:forward_v1 --launch-skip 1 \
  --launch-count 1 --set full --import-source yes -f -o "$OUT/fwd_d128" python3 scripts/profile_forward.py 16 1024 32 8 128 0
ncu -i "$OUT/fwd_d128.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip > "$OUT/fwd_d128.src.csv.gz"
python3 scripts/ncu_stalls.py "$OUT/fwd_d128.src.csv.gz" 60 > "$OUT/fwd_d128.stalls.txt" 2>&1
rm -f "$OUT/fwd_d128.ncu-rep"
echo "== round 2 checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
