#!/usr/bin/env bash
# A later call (notes/prepared/README.md): library cuts3 (patches 0001-0003, then
# split2-cuts3/0001-0005) against library c3 (0001-0003): split2's bits against split_item
# (both value dtypes: the dtype is now a template parameter), the decode GPU suite, the three
# sanitizers on the decode smoke, and per-kernel times. About 4 minutes.
set -u
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD/python:$PWD/scripts:$PWD PYTHONUNBUFFERED=1
mkdir -p "$OUT/logs"
for n in c3 cuts3; do
  mkdir -p .gpu-libs/$n && xz -dc .ab/$n.so.xz > .gpu-libs/$n/libfold_attention.so
  cp .ab/$n.commit .gpu-libs/$n/commit 2>/dev/null
done
T=$PWD/.gpu-libs/c3/libfold_attention.so X=$PWD/.gpu-libs/cuts3/libfold_attention.so
step() {
  local name=$1 limit=$2; shift 2; local s=$(date +%s)
  timeout "$limit" "$@" > "$OUT/logs/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc $(( $(date +%s) - s ))s" >> "$OUT/summary.txt"
  tail -n 3 "$OUT/logs/$name.log" >> "$OUT/summary.txt"
}
step cuts3_bits 60 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py -k "split2 or matches_cpu"
for occ in 2 3; do
  step cuts3_bits_occ$occ 60 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_SPLIT2_OCC=$occ python3 -m pytest \
    -q -m gpu -p no:logging tests/python/test_gpu_decode.py -k split2
done
for tool in racecheck memcheck synccheck; do
  step ${tool}_cuts3 60 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool $tool \
    --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
done
step decode_tests_cuts3 100 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python -k "decode or kvcache or cache"
SH="128,4096,32,8,128;32,8192,32,8,128;1,32768,32,8,128;16,16384,32,4,128;32,16384,16,2,64;1,2048,9,3,64"
step kt_c3 60 env FOLD_ATTENTION_LIBRARY=$T python3 scripts/decode_kernel_times.py --screened-only --shapes "$SH"
step kt_cuts3 60 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_kernel_times.py --screened-only --shapes "$SH"
cat "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
