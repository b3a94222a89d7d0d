#!/usr/bin/env bash
# Session 27, round 3: v1.2's dynamic tile schedule (library e8 = e6 + the counter schedule, its index made warp-uniform (e7 lost 12% to R2UR moves),
# the default through the package; FOLD_FWD_SCHED=static gives e6's kernels).
# - the training GPU tests (new: schedule bits, the counter left zero, two streams, the C
#   entry point's checks, graph replays between eager calls);
# - racecheck / memcheck of the training smoke;
# - forward protocol A/B twice: dynamic (default) against static, and dynamic with tile-order
#   chunks of 8 / 33 query heads and one chunk;
# - the forward protocol once (in protocol.tgz: the device returns a limited number of files).
#   OUT=$OUT bash benchmarks/results/session27/scripts/round3_dyn.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh e8
X=$(L e8)
chk train_tests 240 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py
for tool in racecheck memcheck; do
  chk $tool 120 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool $tool --error-exitcode 1 \
    python3 scripts/gpu_smoke.py --training-only
done
V=FOLD_FWD_SCHED=static,FOLD_FWD_HB_CHUNK=8,FOLD_FWD_HB_CHUNK=33,FOLD_FWD_HB_CHUNK=0
for n in 1 2; do
  step fwd_ab$n 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_BENCH_VARIANTS=$V python3 -m benchmarks.forward \
    --shapes issue --masks both --flex none --rounds 6 --budget-s 120 --out "$OUT/t$n" --no-repo-results
  find "$OUT/t$n" -name '*.jsonl' -exec cp {} "$OUT/fwd_ab$n.jsonl" \; 2>/dev/null
  python3 scripts/ab_table.py "$OUT/fwd_ab$n.jsonl" > "$OUT/fwd_ab$n.txt" 2>&1
  rm -rf "$OUT/t$n"
done
step pf 120 env FOLD_ATTENTION_LIBRARY=$X python3 -m benchmarks.forward --shapes issue \
  --masks both --flex none --rounds 6 --budget-s 90 --out "$OUT/pf" --no-repo-results
mkdir -p "$OUT/protocol" && find "$OUT/pf" -name '*.jsonl' -exec cp {} "$OUT/protocol/" \; 2>/dev/null
rm -rf "$OUT/pf" && tar czf "$OUT/protocol.tgz" -C "$OUT" protocol && rm -rf "$OUT/protocol"
echo "== round 3 checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"; grep -h "D128\|varlen" "$OUT"/fwd_ab*.txt | cut -c1-300
