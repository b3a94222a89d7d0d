#!/usr/bin/env bash
# Prepared in session 54 (its device time had run out): the front's top four strata picked from
# each lane's four stratum keys, sorted once, in four rounds of two warp reductions each (patch
# patches/z-top4-prepared.patch; before, each round scanned the lane's eight slots for its best
# untaken one: ~2k of the z phase's 3.9k cycles at B1 with strata, notes/decode.md section 63).
# Library s55z (main af21b8e + the patch, built at the patch's commit) against main's device code
# (s54r: a4360dc; main's af21b8e differs from it by comments only). If .ab/ lacks them:
#   bash notes/prepared/build_ab.sh s54r s55z benchmarks/results/session54/patches/z-top4-prepared.patch \
#     tests/python/test_gpu_decode.py
# (from a checkout of main; s54r is then main's library under that name). On the device, carrying
# .ab/s55z.so.xz, .ab/s55z.commit, .ab/s55z.test_gpu_decode.py, .ab/s54r.so.xz, .ab/s54r.commit:
#   OUT=$OUT bash benchmarks/results/session54/scripts/next_z_top4.sh
# Prediction: the front's own time -0.4 to -0.7 µs at L >= 193 (strata), nothing at L <= 192; the
# B1 attends at L 2K-8K alike; large batches (8 rows per block, every warp a row) -0.5 to -1%.
# Steps: every decode GPU file on s55z (the new strata-ties test: output and LSE bit for bit
# against the CPU on the exact value path), then graphed per-kernel times of both, two rounds in
# alternating order.
set -u
cd "$(dirname "$0")/../../../.."
cp .ab/s55z.test_gpu_decode.py tests/python/test_gpu_decode.py  # (the patch's; this copy of the tree only)
source notes/prepared/round_common.sh s55z s54r
nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/summary.txt"
chk gpu_decode 220 env FOLD_ATTENTION_LIBRARY=$(L s55z) python3 -m pytest -q -m gpu -p no:logging -x \
  tests/python/test_gpu_decode*.py tests/python/test_gpu_sinks.py
S="1,128,9,3,64;1,2048,9,3,64;1,8192,9,3,64;1,4096,32,8,128;4,4096,32,8,128;32,8192,9,3,64;128,4096,32,8,128"
for r in 1 2; do
  for lib in $([ $r = 1 ] && echo "s54r s55z" || echo "s55z s54r"); do
    step kt_${lib}_r$r 100 env FOLD_ATTENTION_LIBRARY=$(L $lib) python3 scripts/decode_kernel_times.py --shapes "$S"
  done
done
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed" "$LOGS"/gpu_decode.log
for f in "$LOGS"/kt_*.log; do echo "-- $(basename $f)"; grep -E "graphed|decode_front" $f; done
exit $fail
