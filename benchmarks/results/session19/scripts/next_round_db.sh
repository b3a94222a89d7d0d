#!/usr/bin/env bash
# The next session's call for patch 0002 (notes/prepared/README.md), about 6 minutes. Libraries,
# each xz-compressed at .ab/NAME.so.xz with its commit in .ab/NAME.commit: main (the main the
# patch applies to), db (main + 0002) and dbneg (db with `const int par = DB ? (si & 1) : 0;`
# replaced by `const int par = 0;`: one buffer and no end-of-step barrier, a real race, which
# racecheck must report: the negative control that makes db's clean racecheck mean something).
# The libraries' layout, `step` and the shapes: round_common.sh.
#   OUT=$OUT bash notes/prepared/next_round_db.sh
set -u
cd "$(dirname "$0")/../.."
source notes/prepared/round_common.sh main db dbneg
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
