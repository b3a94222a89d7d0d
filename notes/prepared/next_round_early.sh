#!/usr/bin/env bash
# The next session's call for patch 0001, FOLD_DECODE_EARLY (notes/prepared/README.md), about 3.5
# minutes. Libraries, each xz-compressed at .ab/NAME.so.xz with its commit in .ab/NAME.commit:
# main (the main the patch applies to) and early (main + 0001). Times first (judge by the graphed
# attend: under EARLY per-kernel times include the wait for the predecessor), then the decode
# suite (with its new test_decode_early_dependents_same_bits) and the sanitizers with EARLY=2.
# Logs are kept outside $OUT and re-packed after every step, so a cut-off call still returns them (the device returns a limited number of
# files: keep $OUT to summary.txt and logs.tgz).
#   OUT=$OUT bash notes/prepared/next_round_early.sh
set -u
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD/python:$PWD/scripts:$PWD PYTHONUNBUFFERED=1
LOGS=$(mktemp -d)/logs && mkdir -p "$LOGS"
for n in main early; do
  mkdir -p .gpu-libs/$n && xz -dc .ab/$n.so.xz > .gpu-libs/$n/libfold_attention.so
  cp .ab/$n.commit .gpu-libs/$n/commit
done
L() { echo "$PWD/.gpu-libs/$1/libfold_attention.so"; }
step() {
  local name=$1 limit=$2; shift 2; local s=$(date +%s)
  timeout "$limit" "$@" > "$LOGS/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc $(( $(date +%s) - s ))s" >> "$OUT/summary.txt"
  tail -n 3 "$LOGS/$name.log" >> "$OUT/summary.txt"
  tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
}
KT="python3 scripts/decode_kernel_times.py --screened-only --shapes"
SH="128,4096,32,8,128;1,32768,32,8,128;1,2048,9,3,64;1,8192,9,3,64;32,32768,32,2,128;32,16384,32,8,64"
step kt_main 50 env FOLD_ATTENTION_LIBRARY=$(L main) $KT "$SH"
step kt_early0 50 env FOLD_ATTENTION_LIBRARY=$(L early) FOLD_DECODE_EARLY=0 $KT "$SH"
step kt_early2 50 env FOLD_ATTENTION_LIBRARY=$(L early) FOLD_DECODE_EARLY=2 $KT "$SH"
step kt_early1 50 env FOLD_ATTENTION_LIBRARY=$(L early) FOLD_DECODE_EARLY=1 $KT "$SH"
step decode_tests_early2 100 env FOLD_ATTENTION_LIBRARY=$(L early) FOLD_DECODE_EARLY=2 python3 -m \
  pytest -q -m gpu -p no:logging tests/python -k "decode or kvcache or cache"
for tool in racecheck memcheck synccheck; do
  step ${tool}_early2 50 env FOLD_ATTENTION_LIBRARY=$(L early) FOLD_DECODE_EARLY=2 compute-sanitizer \
    --tool $tool --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
done
step kt_dense_main 40 env FOLD_ATTENTION_LIBRARY=$(L main) python3 scripts/decode_kernel_times.py \
  --dense-only --shapes "128,4096,32,8,128;1,32768,32,8,128;1,2048,9,3,64"
step kt_dense_early2 40 env FOLD_ATTENTION_LIBRARY=$(L early) FOLD_DECODE_EARLY=2 \
  python3 scripts/decode_kernel_times.py --dense-only --shapes "128,4096,32,8,128;1,32768,32,8,128;1,2048,9,3,64"
cat "$OUT/summary.txt"
