#!/usr/bin/env bash
# Session 25, round 1 (library `xt`: main + the forward's opt-in v1.2-xt, the ping-pong turn
# carried across tiles with two Q buffers): the training GPU tests with v1.2-xt for the whole
# run (the variant test also checks it with 1, 2 and 3 CTAs, the graph test with 2), memcheck /
# racecheck / synccheck of the training smoke with it (1, 2 and 3 CTAs: the turn ring now spans
# tiles, a missed arrival is a hang), then the forward protocol A/B against the default.
#   OUT=$OUT bash benchmarks/results/session25/scripts/round1_xt.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh xt
X=$(L xt)
chk train_tests_xt 240 env FOLD_ATTENTION_LIBRARY=$X FOLD_FWD_VARIANT=v1.2-xt python3 -m pytest -q -m gpu \
  -p no:logging tests/python/test_gpu_training.py
hung=0
grep -q "^== train_tests_xt rc=124 " "$OUT/summary.txt" && hung=1
if [ $hung = 0 ]; then
  for c in "racecheck 1" "racecheck 3" "synccheck 2" "memcheck 2"; do
    set -- $c
    chk ${1}_xt$2 120 env FOLD_ATTENTION_LIBRARY=$X FOLD_FWD_VARIANT=v1.2-xt FOLD_FWD_CTAS=$2 \
      compute-sanitizer --tool $1 --error-exitcode 1 python3 scripts/gpu_smoke.py --training-only
  done
  step fwd_ab 240 env FOLD_ATTENTION_LIBRARY=$X FOLD_BENCH_VARIANTS=FOLD_FWD_VARIANT=v1.2-xt \
    python3 -m benchmarks.forward --shapes issue --masks both --flex none --rounds 6 --budget-s 170 \
    --out "$OUT/fab" --no-repo-results
  find "$OUT/fab" -name '*.jsonl' -exec cp {} "$OUT/ab_forward.jsonl" \; 2>/dev/null
  python3 scripts/ab_table.py "$OUT/ab_forward.jsonl" > "$OUT/ab_forward.txt" 2>&1
  rm -rf "$OUT/fab"
  cat "$OUT/ab_forward.txt" >> "$OUT/summary.txt"
fi
echo "== round 1 checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
