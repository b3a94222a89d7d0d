#!/usr/bin/env bash
# Session 27, round 1: the tile-order chunk leads.
# - Forward (library e5 = main's device code): FOLD_FWD_HB_CHUNK 4 / 6 / 8 query heads per chunk
#   against the default rule, forward protocol, both masks, two processes (session 26's one-run
#   lead: +9.7% at (8, 2048, 16/16, 128) causal with 4).
# - Backward (e5): FOLD_BWD_HB_CHUNK 2 / 4 / 8 / 64 (hb per chunk) against the default (about
#   two waves of CTAs per chunk), backward protocol, both masks.
# - e6 (= e5 + causal MHA at D 128 in chunks of 4 heads; host code only): the training GPU
#   tests and the forward protocol twice.
#   OUT=$OUT bash benchmarks/results/session27/scripts/round1_chunks.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh e5 e6
X=$(L e5); Y=$(L e6)
ab() {  # ab NAME MODULE VARIANTS SECONDS
  step $1 $4 env FOLD_ATTENTION_LIBRARY=$X FOLD_BENCH_VARIANTS=$3 python3 -m benchmarks.$2 \
    --shapes issue --masks both --flex none --rounds 6 --budget-s $(( $4 - 30 )) \
    --out "$OUT/t_$1" --no-repo-results
  find "$OUT/t_$1" -name '*.jsonl' -exec cp {} "$OUT/$1.jsonl" \; 2>/dev/null
  python3 scripts/ab_table.py "$OUT/$1.jsonl" > "$OUT/$1.txt" 2>&1
  rm -rf "$OUT/t_$1"
}
FV=FOLD_FWD_HB_CHUNK=4,FOLD_FWD_HB_CHUNK=6,FOLD_FWD_HB_CHUNK=8
ab fwd_ab1 forward $FV 150
chk train_tests 200 env FOLD_ATTENTION_LIBRARY=$Y python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py
ab fwd_ab2 forward $FV 150
mkdir -p "$OUT/protocol"
for n in 1 2; do
  step pf$n 120 env FOLD_ATTENTION_LIBRARY=$Y python3 -m benchmarks.forward --shapes issue \
    --masks both --flex none --rounds 6 --budget-s 90 --out "$OUT/pf$n" --no-repo-results
  find "$OUT/pf$n" -name '*.jsonl' -exec cp {} "$OUT/protocol/forward$n.jsonl" \; 2>/dev/null
  rm -rf "$OUT/pf$n"
done
ab bwd_ab backward FOLD_BWD_HB_CHUNK=2,FOLD_BWD_HB_CHUNK=4,FOLD_BWD_HB_CHUNK=8,FOLD_BWD_HB_CHUNK=64 240
echo "== round 1 checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"; grep -h "D128" "$OUT"/fwd_ab*.txt | grep causal
