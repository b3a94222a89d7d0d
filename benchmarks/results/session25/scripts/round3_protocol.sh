#!/usr/bin/env bash
# Session 25, round 3 (library `t2`: main with v1.2's trim on by default, FOLD_FWD_TRIM=0 to turn
# it off): the training GPU tests (the trim bit test now against FOLD_FWD_TRIM=0), the forward
# protocol A/B (trim off; the tile order's chunk at 64 pairs, for D 64 causal MHA) with 8 rounds,
# then the published protocols: forward (issue shapes, both masks) and decode (decode, generate,
# invariance; FlashInfer from .whl, the capture from .cache). Everything lands in $OUT/r3.tgz.
#   OUT=$OUT bash benchmarks/results/session25/scripts/round3_protocol.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh t2
X=$(L t2)
R=$(mktemp -d)/r3 && mkdir -p "$R/protocol"
pack() { cp "$OUT/summary.txt" "$R/" 2>/dev/null; tar czf "$OUT/r3.tgz" -C "$(dirname "$R")" r3 -C "$(dirname "$LOGS")" logs; }
chk train_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py
pack
step fwd_ab 200 env FOLD_ATTENTION_LIBRARY=$X FOLD_BENCH_VARIANTS=FOLD_FWD_TRIM=0,FOLD_FWD_HB_CHUNK=64 \
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
pack
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .whl/*.whl > /dev/null 2>&1
step pr 300 env FOLD_ATTENTION_LIBRARY=$X PYTHONPATH=$PYTHONPATH:/tmp/site FOLD_BENCH_FLASHINFER=1 \
  python3 -m benchmarks.run_all --quick --only decode,generate,invariance --budget-s 200 --out "$R/pr"
find "$R/pr" -name '*.jsonl' -exec cp {} "$R/protocol/" \;
rm -rf "$R/pr"
ls -la "$R/protocol" >> "$OUT/summary.txt"
echo "== round 3 checks failed: $fail" >> "$OUT/summary.txt"
pack
rm -f "$OUT/logs.tgz"
tail -n 40 "$OUT/summary.txt"
