#!/usr/bin/env bash
# Session 30, round 5: the forward's K / V scan sliced (FOLD_FWD_KV_SCAN=slice, the new default):
# each key block's rows split over every tile of the group's first head that loads it, instead
# of one tile scanning the whole block it owns (session 28's form, now "owner"). Why: the scan's
# cost (1-3.6% of the forward at G 1, sessions 28-29) is the time it holds its owned block's
# stages; sliced, each stage is held for a few rows. Prediction: the scan's cost under 1%.
# Library s30 (main + the change). 1. kv-bounds GPU tests (slice and owner, a new row-by-row
# coverage test) and the training GPU tests. 2. racecheck / memcheck of the training smoke with
# the bounds forced on; synccheck (its known D 64 report, session 28) printed, not counted.
# 3. Forward protocol A/B in one process: slice (default) / owner / no bounds. 4. The training
# protocol (forward, backward), published if the A/B holds.
#   OUT=$OUT bash benchmarks/results/session30/scripts/round5_slice.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s30
X=$(L s30)
ab() {  # ab NAME MODULE VARIANTS SECONDS
  step $1 $4 env FOLD_ATTENTION_LIBRARY=$X FOLD_TRAIN_KV_BOUNDS=1 FOLD_BENCH_VARIANTS=$3 \
    python3 -m benchmarks.$2 --shapes issue --masks both --flex none --rounds 6 \
    --budget-s $(( $4 - 30 )) --out "$OUT/t_$1" --no-repo-results
  find "$OUT/t_$1" -name '*.jsonl' -exec cp {} "$OUT/$1.jsonl" \; 2>/dev/null
  python3 scripts/ab_table.py "$OUT/$1.jsonl" > "$OUT/$1.txt" 2>&1
  rm -rf "$OUT/t_$1"
}
chk kvb_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_kv_bounds.py
chk train_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py
for tool in racecheck memcheck; do
  chk $tool 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_TRAIN_KV_BOUNDS=1 compute-sanitizer \
    --tool $tool --error-exitcode 1 python3 scripts/gpu_smoke.py --training-only
done
step synccheck 100 env FOLD_ATTENTION_LIBRARY=$X FOLD_TRAIN_KV_BOUNDS=1 compute-sanitizer \
  --tool synccheck --error-exitcode 1 --print-limit 2 python3 scripts/gpu_smoke.py --training-only
ab fwd_ab forward FOLD_FWD_KV_SCAN=owner,FOLD_TRAIN_KV_BOUNDS=0 150
mkdir -p "$OUT/protocol"
for m in forward backward; do
  step p_$m 150 env FOLD_ATTENTION_LIBRARY=$X python3 -m benchmarks.$m --shapes issue \
    --masks both --flex none --rounds 6 --budget-s 120 --out "$OUT/p_$m" --no-repo-results
  find "$OUT/p_$m" -name '*.jsonl' -exec cp {} "$OUT/protocol/$m.jsonl" \; 2>/dev/null
  rm -rf "$OUT/p_$m"
done
echo "== round 5 checks failed: $fail" >> "$OUT/summary.txt"
grep -v "^\.\.\." "$OUT/summary.txt" | tail -30; cat "$OUT/fwd_ab.txt"
