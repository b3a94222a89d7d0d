#!/usr/bin/env bash
# The next call for FOLD_DECODE_EARLY (patch 0001 in this folder, built as library early, and the
# main it applies to as library main: each xz-compressed at .ab/NAME.so.xz with its commit in
# .ab/NAME.commit). Per-kernel decode times of main and of early with EARLY=0 / 2 (one process
# each; EARLY=0 is not main's binary: the pass-1 kernels' registers moved), the decode GPU suite with EARLY=2,
# the three sanitizers on the decode smoke with EARLY=2, then times with EARLY=1. Logs are kept
# outside $OUT and re-packed after every step, so a cut-off call still returns them.
set -u
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD/python:$PWD/scripts:$PWD PYTHONUNBUFFERED=1
LOGS=$(mktemp -d)/logs && mkdir -p "$LOGS"
for n in main early; do
  mkdir -p .gpu-libs/$n && xz -dc .ab/$n.so.xz > .gpu-libs/$n/libfold_attention.so
  cp .ab/$n.commit .gpu-libs/$n/commit
done
export FOLD_ATTENTION_LIBRARY=$PWD/.gpu-libs/early/libfold_attention.so
step() {
  local name=$1 limit=$2; shift 2; local s=$(date +%s)
  timeout "$limit" "$@" > "$LOGS/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc $(( $(date +%s) - s ))s" >> "$OUT/summary.txt"
  tail -n 3 "$LOGS/$name.log" >> "$OUT/summary.txt"
  tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
}
SH="128,4096,32,8,128;1,32768,32,8,128;1,2048,9,3,64;1,8192,9,3,64"
step kt_main 40 env FOLD_ATTENTION_LIBRARY=$PWD/.gpu-libs/main/libfold_attention.so \
  python3 scripts/decode_kernel_times.py --screened-only --shapes "$SH"
step kt_e0 40 env FOLD_DECODE_EARLY=0 python3 scripts/decode_kernel_times.py --screened-only --shapes "$SH"
step kt_e2 40 env FOLD_DECODE_EARLY=2 python3 scripts/decode_kernel_times.py --screened-only --shapes "$SH"
step decode_tests_e2 90 env FOLD_DECODE_EARLY=2 python3 -m pytest -q -m gpu -p no:logging \
  tests/python -k "decode or kvcache or cache"
for tool in racecheck memcheck synccheck; do
  step ${tool}_e2 50 env FOLD_DECODE_EARLY=2 compute-sanitizer --tool $tool --error-exitcode 1 \
    python3 scripts/gpu_smoke.py --decode-only
done
step kt_e1 40 env FOLD_DECODE_EARLY=1 python3 scripts/decode_kernel_times.py --screened-only --shapes "$SH"
step kt_e2b 40 env FOLD_DECODE_EARLY=2 python3 scripts/decode_kernel_times.py --screened-only --shapes "$SH"
cat "$OUT/summary.txt"
