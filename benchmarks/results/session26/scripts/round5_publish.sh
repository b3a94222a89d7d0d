#!/usr/bin/env bash
# Session 26, round 5 (library `e4`: the tree row max for the two-consumer kernels, the chain for
# D 64's three consumers; every forward kernel's SASS equals e3's or e2's): the training GPU tests
# and the published forward protocol.
#   OUT=$OUT bash benchmarks/results/session26/scripts/round5_publish.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh e4
X=$(L e4)
chk train_tests 240 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py
mkdir -p "$OUT/protocol"
step pf 150 env FOLD_ATTENTION_LIBRARY=$X python3 -m benchmarks.forward --shapes issue --masks both \
  --flex none --rounds 6 --budget-s 90 --out "$OUT/pf" --no-repo-results
find "$OUT/pf" -name '*.jsonl' -exec cp {} "$OUT/protocol/" \; 2>/dev/null
rm -rf "$OUT/pf"
echo "== round 5 checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
