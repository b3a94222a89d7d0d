#!/usr/bin/env bash
# Session 21, round 9: the forward's tile-order rule for dense causal MHA at D 128 (library `fwd`):
# the training GPU tests (the forward's bits under every order included), then the forward
# protocol (published; the last forward run was session 7's).
#   OUT=$OUT bash benchmarks/results/session21/scripts/round9_fwd_final.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh fwd
F=$(L fwd)
chk train_tests 150 env FOLD_ATTENTION_LIBRARY=$F python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py
step bf 150 env FOLD_ATTENTION_LIBRARY=$F python3 -m benchmarks.forward --shapes issue --masks both \
  --flex none --rounds 6 --budget-s 90 --no-repo-results --out "$OUT/bf"
mkdir -p "$OUT/protocol" && find "$OUT/bf" -name '*.jsonl' -exec cp {} "$OUT/protocol/" \; 2>/dev/null
rm -rf "$OUT/bf"
echo "== round 9 checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
