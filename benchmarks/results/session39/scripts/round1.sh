#!/usr/bin/env bash
# Prepared in session 39 (no device was lent): the first device call of the next session.
#   m39: main's library (its host checks changed in session 39: the C ABI's views, alignment,
#        the decode workspace size, the training preprocess / workspace size; compiled only);
#   p39: main + patches/decode-precheck-large-keys-prepared.patch (the precheck kernel flags bf16
#        keys whose rotation might overflow).
# Build both here first (CPU machine; commit files as round_common.sh expects):
#   cmake --build build-gpu -j2 --target fold_attention
#   xz -T2 -c build-gpu/libfold_attention.so.0.1.0 > .ab/m39.so.xz; git rev-parse --short HEAD > .ab/m39.commit
#   git am benchmarks/results/session39/patches/decode-precheck-large-keys-prepared.patch (on a branch),
#   rebuild, the same into .ab/p39.*, then back to main. Carry [".ab"].
#   OUT=$OUT bash benchmarks/results/session39/scripts/round1.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh m39 p39
M=$(L m39)
P=$(L p39)
# 1. Every GPU test on main's library (the new host checks on every CUDA path).
chk gpu_all 420 env FOLD_ATTENTION_LIBRARY=$M python3 -m pytest -q -m gpu -p no:logging tests/python
# 2. The precheck patch: its new test and the step checks (p39's package has the test: run the
#    branch's test file through its own library; the patch changes decode.py too, so apply it to
#    the tree first: git apply --include 'python/*' --include 'tests/*').
git apply --include 'python/*' --include 'tests/*' benchmarks/results/session39/patches/decode-precheck-large-keys-prepared.patch
chk precheck_tests 120 env FOLD_ATTENTION_LIBRARY=$P python3 -m pytest -q -p no:logging \
  tests/python/test_decode_step_checks.py tests/python/test_decode_api.py
git apply -R --include 'python/*' --include 'tests/*' benchmarks/results/session39/patches/decode-precheck-large-keys-prepared.patch
# 3. Session 38's prepared backward chunk A/B (its round 5), on main's library.
chk sched_test 120 env FOLD_ATTENTION_LIBRARY=$M python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py -k "schedule"
SHP="8,2048,16,16,128;16,1024,32,8,128;8,2048,32,32,64;4,4096,32,8,128;2,8192,32,8,128"
step chunk_a 150 env FOLD_ATTENTION_LIBRARY=$M FOLD_TIME_SHAPES="$SHP" python3 scripts/time_backward_variants.py \
  default FOLD_BWD_HB_CHUNK=4 FOLD_BWD_HB_CHUNK=2
step chunk_b 150 env FOLD_ATTENTION_LIBRARY=$M FOLD_TIME_SHAPES="$SHP" python3 scripts/time_backward_variants.py \
  FOLD_BWD_HB_CHUNK=2 FOLD_BWD_HB_CHUNK=4 default
# 4. The eager step's host path: session 30 measured the B1 eager step at 86-91 us and the generate
#    suite's at 125-139; session 37's published (--quick) generate run says 179-290. Which is it now?
step eager_step 120 env FOLD_ATTENTION_LIBRARY=$M python3 scripts/decode_eager_step.py \
  --shapes "1,8192,9,3,64;1,4096,64,8,128" --steps 100 --rounds 5
step generate_quick 150 env FOLD_ATTENTION_LIBRARY=$M python3 -m benchmarks.generate --quick --budget-s 90 \
  --no-repo-results --out "$LOGS/gen"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed" "$LOGS"/gpu_all.log "$LOGS"/precheck_tests.log "$LOGS"/sched_test.log
for f in "$LOGS"/chunk_*.log "$LOGS"/eager_step.log; do echo "-- $(basename $f)"; grep -v "^\s*$" $f | tail -14; done
