#!/usr/bin/env bash
# The next session's call for patch 0001, FOLD_DECODE_EARLY (notes/prepared/README.md), about 3.5
# minutes. Libraries, each xz-compressed at .ab/NAME.so.xz with its commit in .ab/NAME.commit:
# main (the main the patch applies to) and early (main + 0001). Times first (judge by the graphed
# attend: under EARLY per-kernel times include the wait for the predecessor), then the decode
# suite (with its new test_decode_early_dependents_same_bits) and the sanitizers with EARLY=2.
# The libraries' layout, `step` and the shapes: round_common.sh.
#   OUT=$OUT bash notes/prepared/next_round_early.sh
set -u
cd "$(dirname "$0")/../.."
source notes/prepared/round_common.sh main early
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
