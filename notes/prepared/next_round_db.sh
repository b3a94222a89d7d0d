#!/usr/bin/env bash
# The next session's call for patch 0002 (notes/prepared/README.md), about 6 minutes. Libraries,
# each xz-compressed at .ab/NAME.so.xz with its commit in .ab/NAME.commit: main (the main the
# patch applies to), db (main + 0002) and dbneg (db with `const int par = DB ? (si & 1) : 0;`
# replaced by `const int par = 0;`: one buffer and no end-of-step barrier, a real race, which
# racecheck must report: the negative control that makes db's clean racecheck mean something).
# Logs are kept outside $OUT and re-packed after every step, so a cut-off call still returns them (the device returns a limited number of
# files: keep $OUT to summary.txt and logs.tgz).
#   OUT=$OUT bash notes/prepared/next_round_db.sh
set -u
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD/python:$PWD/scripts:$PWD PYTHONUNBUFFERED=1
LOGS=$(mktemp -d)/logs && mkdir -p "$LOGS"
for n in main db dbneg; do
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
step kt_db 50 env FOLD_ATTENTION_LIBRARY=$(L db) $KT "$SH"
# split2 bit for bit with split_item (the non-SA forms are the changed ones), occupancy forced
step db_bits 60 env FOLD_ATTENTION_LIBRARY=$(L db) python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py -k "split2 or matches_cpu"
for occ in 2 3; do
  step db_bits_occ$occ 40 env FOLD_ATTENTION_LIBRARY=$(L db) FOLD_DECODE_SPLIT2_OCC=$occ python3 -m \
    pytest -q -m gpu -p no:logging tests/python/test_gpu_decode.py -k split2
done
# racecheck: the negative control first (must report hazards: rc 1), then db on the smoke (SA
# off) and on the split2 bit test (every form, ragged lengths of 3 and 4 steps)
step racecheck_dbneg 90 env FOLD_ATTENTION_LIBRARY=$(L dbneg) FOLD_DECODE_SPLIT2_SA=0 compute-sanitizer \
  --tool racecheck --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
step racecheck_db 90 env FOLD_ATTENTION_LIBRARY=$(L db) FOLD_DECODE_SPLIT2_SA=0 compute-sanitizer \
  --tool racecheck --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
step racecheck_db_bits 150 env FOLD_ATTENTION_LIBRARY=$(L db) compute-sanitizer --tool racecheck \
  --error-exitcode 1 python3 -m pytest -q -m gpu -p no:logging tests/python/test_gpu_decode.py \
  -k split2_same_bits
for tool in synccheck memcheck; do
  step ${tool}_db 60 env FOLD_ATTENTION_LIBRARY=$(L db) FOLD_DECODE_SPLIT2_SA=0 compute-sanitizer \
    --tool $tool --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
done
step decode_tests_db 100 env FOLD_ATTENTION_LIBRARY=$(L db) python3 -m pytest -q -m gpu -p no:logging \
  tests/python -k "decode or kvcache or cache"
cat "$OUT/summary.txt"
