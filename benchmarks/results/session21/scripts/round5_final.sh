#!/usr/bin/env bash
# Session 21, round 5: main's final library (`final`: the decode changes and the backward's 16-byte
# epilogue): gradient hashes against main before the epilogue (`main` = 76502c3), the training
# GPU tests, the backward protocol (published); then the decode GPU suite once more.
#   OUT=$OUT bash benchmarks/results/session21/scripts/round5_final.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh main final
M=$(L main); F=$(L final)
chk hashes_final 90 env FOLD_ATTENTION_LIBRARY=$F python3 scripts/grad_hashes.py
chk hashes_main 90 env FOLD_ATTENTION_LIBRARY=$M python3 scripts/grad_hashes.py
chk diff_main 10 diff "$LOGS/hashes_final.log" "$LOGS/hashes_main.log"
chk train_tests 150 env FOLD_ATTENTION_LIBRARY=$F python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py
step pb 200 env FOLD_ATTENTION_LIBRARY=$F python3 -m benchmarks.backward --shapes issue --masks both \
  --flex none --rounds 6 --out "$OUT/pb" --no-repo-results
mkdir -p "$OUT/protocol" && find "$OUT/pb" -name '*.jsonl' -exec cp {} "$OUT/protocol/" \; 2>/dev/null
rm -rf "$OUT/pb"
chk decode_tests 150 env FOLD_ATTENTION_LIBRARY=$F python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_decode_step_checks.py
echo "== round 5 checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
