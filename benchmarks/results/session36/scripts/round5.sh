#!/usr/bin/env bash
# Session 36, round 5: main's library at the end of the session (m41: the v8 ring with plane B's
# division on the f16 pair, the planner, the ring's row sums, the EPT rule): every GPU test of the
# suite, and v8 / bf16 hashes against round 4's logs (v8r2 / v8r3; main's bf16 bits unchanged).
#   OUT=$OUT bash benchmarks/results/session36/scripts/round5.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh m41
X=$(L m41)
chk gpu_suite 330 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging tests/python
step hash_v8 90 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_hashes.py --depths none,16 --v8
step hash_bf16 90 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_hashes.py --depths none,16
echo "== round 5 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep -v "^\.\.\." "$OUT/summary.txt" | tail -n 20
cat "$LOGS/hash_v8.log" "$LOGS/hash_bf16.log"
