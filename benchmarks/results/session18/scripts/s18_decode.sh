#!/usr/bin/env bash
# Session 18, first call: library cuts3 (patches 0001-0003 + split2-cuts3/0001-0005) checked in
# full (split2's bits in every form, the three sanitizers on the decode smoke, the decode GPU
# suite), c3 (0001-0003) bits, per-kernel decode times of main / cuts2 / c3 / cuts3 in one
# process each; if every check of cuts3 passed, the decode protocol with cuts3.
set -u
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD/python:$PWD/scripts:$PWD PYTHONUNBUFFERED=1
mkdir -p "$OUT/logs"
for n in main cuts2 c3 cuts3; do
  mkdir -p .gpu-libs/$n && xz -dc .ab/$n.so.xz > .gpu-libs/$n/libfold_attention.so
  cp .ab/$n.commit .gpu-libs/$n/commit 2>/dev/null
done
L() { echo "$PWD/.gpu-libs/$1/libfold_attention.so"; }
X=$(L cuts3)
fail=0
step() {
  local name=$1 limit=$2; shift 2; local s=$(date +%s)
  timeout "$limit" "$@" > "$OUT/logs/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc $(( $(date +%s) - s ))s" >> "$OUT/summary.txt"
  tail -n 3 "$OUT/logs/$name.log" >> "$OUT/summary.txt"
  return $rc
}
chk() { step "$@" || fail=1; }
chk cuts3_bits 60 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py -k "split2 or matches_cpu"
for occ in 2 3; do
  chk cuts3_bits_occ$occ 60 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_SPLIT2_OCC=$occ python3 -m pytest \
    -q -m gpu -p no:logging tests/python/test_gpu_decode.py -k split2
done
for tool in racecheck memcheck synccheck; do
  chk ${tool}_cuts3 75 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool $tool \
    --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
done
chk decode_tests_cuts3 120 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python -k "decode or kvcache or cache"
step c3_bits 60 env FOLD_ATTENTION_LIBRARY=$(L c3) python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py -k "split2 or matches_cpu"
SH="128,4096,32,8,128;32,8192,32,8,128;1,32768,32,8,128;16,16384,32,4,128;32,16384,16,2,64;1,2048,9,3,64"
for n in main cuts2 c3 cuts3; do
  step kt_$n 60 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/decode_kernel_times.py --screened-only --shapes "$SH"
done
echo "== cuts3 checks failed: $fail" >> "$OUT/summary.txt"
if [ $fail = 0 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .whl/*.whl > "$OUT/logs/wheels.log" 2>&1
  step pr 240 env FOLD_ATTENTION_LIBRARY=$X PYTHONPATH=$PYTHONPATH:/tmp/site FOLD_BENCH_FLASHINFER=1 \
    python3 -m benchmarks.run_all --quick --only decode,generate,invariance --budget-s 220 --out "$OUT/pr"
  mkdir -p "$OUT/protocol" && find "$OUT/pr" -name '*.jsonl' -exec cp {} "$OUT/protocol/" \;
  rm -rf "$OUT/pr"
fi
cat "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
