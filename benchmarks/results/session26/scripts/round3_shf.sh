#!/usr/bin/env bash
# Session 26, round 3 (library `e2`: v1.2's quad-transpose epilogue the default, FOLD_FWD_EPI=stg
# the 4-byte stores): the training GPU tests, racecheck / memcheck of the training smoke, an
# interleaved A/B at D 96 and D 256 (shapes outside the protocol), the forward protocol A/B
# (default against stg) and the published forward protocol.
#   OUT=$OUT bash benchmarks/results/session26/scripts/round3_shf.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh e2
X=$(L e2)
chk train_tests 240 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py
for c in "racecheck 1" "racecheck 3" "memcheck 2"; do
  set -- $c
  chk ${1}_$2 120 env FOLD_ATTENTION_LIBRARY=$X FOLD_FWD_CTAS=$2 \
    compute-sanitizer --tool $1 --error-exitcode 1 python3 scripts/gpu_smoke.py --training-only
done
step env_ab 120 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/forward_env_ab.py FOLD_FWD_EPI shf,stg \
  8,2048,16,16,96 16,1024,32,8,96 4,4096,16,16,256 16,1024,16,4,256 8,2048,32,32,64
cp "$LOGS/env_ab.log" "$OUT/env_ab.txt"
step fwd_ab 300 env FOLD_ATTENTION_LIBRARY=$X FOLD_BENCH_VARIANTS=FOLD_FWD_EPI=stg \
  python3 -m benchmarks.forward --shapes issue --masks both --flex none --rounds 6 --budget-s 150 \
  --out "$OUT/fab" --no-repo-results
find "$OUT/fab" -name '*.jsonl' -exec cp {} "$OUT/ab_forward.jsonl" \; 2>/dev/null
python3 scripts/ab_table.py "$OUT/ab_forward.jsonl" > "$OUT/ab_forward.txt" 2>&1
rm -rf "$OUT/fab"
mkdir -p "$OUT/protocol"
step pf 150 env FOLD_ATTENTION_LIBRARY=$X python3 -m benchmarks.forward --shapes issue --masks both \
  --flex none --rounds 6 --budget-s 90 --out "$OUT/pf" --no-repo-results
find "$OUT/pf" -name '*.jsonl' -exec cp {} "$OUT/protocol/" \; 2>/dev/null
rm -rf "$OUT/pf"
echo "== round 3 checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
