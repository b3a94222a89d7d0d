#!/usr/bin/env bash
# Session 18, second call: the backward's FCVT (patch 0004, library fcvt): hashes of its default,
# of its f2i form and of main (all three must be identical), the training GPU tests, the three
# sanitizers on the training smoke, the graphed A/B against f2i (6 rounds); if the checks passed,
# the backward protocol with library fcvt.
set -u
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD/python:$PWD/scripts:$PWD PYTHONUNBUFFERED=1
mkdir -p "$OUT/logs"
for n in main fcvt; do
  mkdir -p .gpu-libs/$n && xz -dc .ab/$n.so.xz > .gpu-libs/$n/libfold_attention.so
  cp .ab/$n.commit .gpu-libs/$n/commit 2>/dev/null
done
M=$PWD/.gpu-libs/main/libfold_attention.so F=$PWD/.gpu-libs/fcvt/libfold_attention.so
fail=0
step() {
  local name=$1 limit=$2; shift 2; local s=$(date +%s)
  timeout "$limit" "$@" > "$OUT/logs/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc $(( $(date +%s) - s ))s" >> "$OUT/summary.txt"
  tail -n 3 "$OUT/logs/$name.log" >> "$OUT/summary.txt"
  return $rc
}
chk() { step "$@" || fail=1; }
chk hashes_fcvt 60 env FOLD_ATTENTION_LIBRARY=$F python3 scripts/grad_hashes.py
chk hashes_f2i 60 env FOLD_ATTENTION_LIBRARY=$F FOLD_BWD_VARIANT=f2i python3 scripts/grad_hashes.py
chk hashes_main 60 env FOLD_ATTENTION_LIBRARY=$M python3 scripts/grad_hashes.py
chk diff_f2i 10 diff "$OUT/logs/hashes_fcvt.log" "$OUT/logs/hashes_f2i.log"
chk diff_main 10 diff "$OUT/logs/hashes_fcvt.log" "$OUT/logs/hashes_main.log"
chk train_tests 150 env FOLD_ATTENTION_LIBRARY=$F python3 -m pytest -q -m gpu -p no:logging \
  tests/python -k "not decode and not kvcache and not cache"
for tool in racecheck synccheck memcheck; do
  chk ${tool}_fcvt 60 env FOLD_ATTENTION_LIBRARY=$F compute-sanitizer --tool $tool \
    --error-exitcode 1 python3 scripts/gpu_smoke.py --training-only
done
step ab 150 env FOLD_ATTENTION_LIBRARY=$F FOLD_BENCH_VARIANTS=f2i python3 -m benchmarks.backward \
  --shapes issue --masks both --flex none --rounds 6 --out "$OUT/ab" --no-repo-results
find "$OUT/ab" -name '*.jsonl' -exec cp {} "$OUT/ab_backward.jsonl" \; 2>/dev/null
python3 scripts/ab_table.py "$OUT/ab_backward.jsonl" > "$OUT/ab_table.txt" 2>&1
rm -rf "$OUT/ab"
echo "== fcvt checks failed: $fail" >> "$OUT/summary.txt"
if [ $fail = 0 ]; then
  step pb 150 env FOLD_ATTENTION_LIBRARY=$F python3 -m benchmarks.backward --shapes issue --masks both \
    --flex none --rounds 6 --out "$OUT/pb" --no-repo-results
  find "$OUT/pb" -name '*.jsonl' -exec cp {} "$OUT/backward.jsonl" \; 2>/dev/null
  rm -rf "$OUT/pb"
fi
cat "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
