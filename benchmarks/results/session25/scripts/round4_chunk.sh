#!/usr/bin/env bash
# Session 25, round 4 (library `c4`: round 3's + the tile order's half-wave chunks for dense
# causal MHA at D 64 from S 2048): the training GPU tests, the forward protocol A/B against one
# chunk (FOLD_FWD_HB_CHUNK=0, the previous order of the causal shapes but D 128 MHA's), then the
# published forward protocol. Everything lands in $OUT/r4.tgz.
#   OUT=$OUT bash benchmarks/results/session25/scripts/round4_chunk.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh c4
X=$(L c4)
R=$(mktemp -d)/r4 && mkdir -p "$R/protocol"
pack() { cp "$OUT/summary.txt" "$R/" 2>/dev/null; tar czf "$OUT/r4.tgz" -C "$(dirname "$R")" r4 -C "$(dirname "$LOGS")" logs; }
chk train_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py
pack
step fwd_ab 200 env FOLD_ATTENTION_LIBRARY=$X FOLD_BENCH_VARIANTS=FOLD_FWD_HB_CHUNK=0 \
  python3 -m benchmarks.forward --shapes issue --masks both --flex none --rounds 8 --budget-s 150 \
  --out "$R/fab" --no-repo-results
find "$R/fab" -name '*.jsonl' -exec cp {} "$R/ab_forward.jsonl" \; 2>/dev/null
rm -rf "$R/fab"
python3 scripts/ab_table.py "$R/ab_forward.jsonl" > "$R/ab_forward.txt" 2>&1
cat "$R/ab_forward.txt" >> "$OUT/summary.txt"
pack
step pf 150 env FOLD_ATTENTION_LIBRARY=$X python3 -m benchmarks.forward --shapes issue --masks both \
  --flex none --rounds 6 --budget-s 90 --out "$R/pf" --no-repo-results
find "$R/pf" -name '*.jsonl' -exec cp {} "$R/protocol/" \; 2>/dev/null
rm -rf "$R/pf"
echo "== round 4 checks failed: $fail" >> "$OUT/summary.txt"
pack
rm -f "$OUT/logs.tgz"
tail -n 30 "$OUT/summary.txt"
