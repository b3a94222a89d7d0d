#!/usr/bin/env bash
# Session 21, round 4: the backward's dK / dV epilogue through shared memory with 16-byte stores
# (library `epi`, wip/bwd-epi; `main` = main's kernels): gradient hashes of epi's default, of its
# old epilogue (FOLD_BWD_VARIANT=epi0) and of main (all three must be identical), the training
# GPU tests, the three sanitizers on the training smoke, the graphed A/B against epi0 (6 rounds);
# if the checks passed, the backward protocol with epi.
#   OUT=$OUT bash benchmarks/results/session21/scripts/round4_backward.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh main epi
M=$(L main); E=$(L epi)
chk hashes_epi 90 env FOLD_ATTENTION_LIBRARY=$E python3 scripts/grad_hashes.py
chk hashes_epi0 90 env FOLD_ATTENTION_LIBRARY=$E FOLD_BWD_VARIANT=epi0 python3 scripts/grad_hashes.py
chk hashes_main 90 env FOLD_ATTENTION_LIBRARY=$M python3 scripts/grad_hashes.py
chk diff_epi0 10 diff "$LOGS/hashes_epi.log" "$LOGS/hashes_epi0.log"
chk diff_main 10 diff "$LOGS/hashes_epi.log" "$LOGS/hashes_main.log"
chk train_tests 200 env FOLD_ATTENTION_LIBRARY=$E python3 -m pytest -q -m gpu -p no:logging \
  tests/python -k "not decode and not kvcache and not cache"
for tool in racecheck synccheck memcheck; do
  chk ${tool} 90 env FOLD_ATTENTION_LIBRARY=$E compute-sanitizer --tool $tool \
    --error-exitcode 1 python3 scripts/gpu_smoke.py --training-only
done
step ab 200 env FOLD_ATTENTION_LIBRARY=$E FOLD_BENCH_VARIANTS=epi0 python3 -m benchmarks.backward \
  --shapes issue --masks both --flex none --rounds 6 --out "$OUT/ab" --no-repo-results
find "$OUT/ab" -name '*.jsonl' -exec cp {} "$OUT/ab_backward.jsonl" \; 2>/dev/null
python3 scripts/ab_table.py "$OUT/ab_backward.jsonl" > "$OUT/ab_table.txt" 2>&1
rm -rf "$OUT/ab"
cat "$OUT/ab_table.txt" >> "$OUT/summary.txt"
echo "== epi checks failed: $fail" >> "$OUT/summary.txt"
if [ $fail = 0 ] && [ "${EPI_PB:-1}" = 1 ]; then
  step pb 200 env FOLD_ATTENTION_LIBRARY=$E python3 -m benchmarks.backward --shapes issue --masks both \
    --flex none --rounds 6 --out "$OUT/pb" --no-repo-results
  mkdir -p "$OUT/protocol" && find "$OUT/pb" -name '*.jsonl' -exec cp {} "$OUT/protocol/" \; 2>/dev/null
  rm -rf "$OUT/pb"
fi
cat "$OUT/summary.txt"
