#!/usr/bin/env bash
# Session 26, round 1 (run from session 25's copy, benchmarks/results/session25/scripts/round6_refactor.sh) (library `r6`: the review's refactor of forward.cu, same behaviour: one
# V-tail helper, issue_pv with its key count, one Q / K / V map setup): the training GPU tests,
# then the forward protocol with main before the refactor (`c4`) and after (`r6`), one process
# each, to check that nothing moved.
#   OUT=$OUT bash benchmarks/results/session25/scripts/round6_refactor.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh c4 r6
chk train_tests 200 env FOLD_ATTENTION_LIBRARY=$(L r6) python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py
for lib in c4 r6; do
  step pf_$lib 120 env FOLD_ATTENTION_LIBRARY=$(L $lib) python3 -m benchmarks.forward --shapes issue \
    --masks both --flex none --rounds 6 --budget-s 60 --out "$OUT/pf_$lib" --no-repo-results
  find "$OUT/pf_$lib" -name '*.jsonl' -exec cp {} "$OUT/forward_$lib.jsonl" \; 2>/dev/null
  rm -rf "$OUT/pf_$lib"
done
echo "== round 6 checks failed: $fail" >> "$OUT/summary.txt"
grep -h "ours" "$LOGS"/pf_*.log | tail -2
cat "$OUT/summary.txt"
