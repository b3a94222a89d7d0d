#!/usr/bin/env bash
# Next session, first call (notes/prepared/README.md): sanitizers and decode GPU tests of library
# cuts2 (patches 0001-0002), the bit test and per-kernel times of library c3 (0001-0003), then
# the backward's FCVT (0004, library fcvt): hashes against its own f2i form, the training GPU
# tests, sanitizers, and the graphed A/B against f2i.
set -u
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD/python:$PWD/scripts:$PWD PYTHONUNBUFFERED=1
mkdir -p "$OUT/logs"
# Each library in .gpu-libs/NAME/ with a `commit` file beside it (from .ab/NAME.commit): the
# benchmarks' provenance then names the library's commit (benchmarks/provenance.py).
for n in cuts2 c3 fcvt; do
  mkdir -p .gpu-libs/$n && xz -dc .ab/$n.so.xz > .gpu-libs/$n/libfold_attention.so
  cp .ab/$n.commit .gpu-libs/$n/commit 2>/dev/null
done
C=$PWD/.gpu-libs/cuts2/libfold_attention.so T=$PWD/.gpu-libs/c3/libfold_attention.so
F=$PWD/.gpu-libs/fcvt/libfold_attention.so
step() {
  local name=$1 limit=$2; shift 2; local s=$(date +%s)
  timeout "$limit" "$@" > "$OUT/logs/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc $(( $(date +%s) - s ))s" >> "$OUT/summary.txt"
  tail -n 3 "$OUT/logs/$name.log" >> "$OUT/summary.txt"
}
for tool in racecheck memcheck synccheck; do
  step ${tool}_cuts2 45 env FOLD_ATTENTION_LIBRARY=$C compute-sanitizer --tool $tool \
    --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
done
step c3_bits 40 env FOLD_ATTENTION_LIBRARY=$T python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py -k "split2 or matches_cpu"
step decode_tests_cuts2 70 env FOLD_ATTENTION_LIBRARY=$C python3 -m pytest -q -m gpu -p no:logging \
  tests/python -k "decode or kvcache or cache"
SH="128,4096,32,8,128;16,16384,32,4,128;32,16384,16,2,64"
step kt_cuts2 25 env FOLD_ATTENTION_LIBRARY=$C python3 scripts/decode_kernel_times.py --screened-only --shapes "$SH"
step kt_c3 25 env FOLD_ATTENTION_LIBRARY=$T python3 scripts/decode_kernel_times.py --screened-only --shapes "$SH"
step hashes_fcvt 60 env FOLD_ATTENTION_LIBRARY=$F python3 scripts/grad_hashes.py
step hashes_f2i 60 env FOLD_ATTENTION_LIBRARY=$F FOLD_BWD_VARIANT=f2i python3 scripts/grad_hashes.py
step diff_fcvt 10 diff "$OUT/logs/hashes_fcvt.log" "$OUT/logs/hashes_f2i.log"
step train_tests 200 env FOLD_ATTENTION_LIBRARY=$F python3 -m pytest -q -m gpu -p no:logging \
  tests/python -k "not decode and not kvcache and not cache"
for tool in racecheck synccheck memcheck; do
  step ${tool}_fcvt 60 env FOLD_ATTENTION_LIBRARY=$F compute-sanitizer --tool $tool \
    --error-exitcode 1 python3 scripts/gpu_smoke.py --training-only
done
step ab 200 env FOLD_ATTENTION_LIBRARY=$F FOLD_BENCH_VARIANTS=f2i python3 -m benchmarks.backward \
  --shapes issue --masks both --flex none --rounds 6 --out "$OUT/ab" --no-repo-results
find "$OUT/ab" -name '*.jsonl' -exec cp {} "$OUT/ab_backward.jsonl" \; 2>/dev/null
python3 scripts/ab_table.py "$OUT/ab_backward.jsonl" > "$OUT/ab_table.txt" 2>&1
rm -rf "$OUT/ab"
cat "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
