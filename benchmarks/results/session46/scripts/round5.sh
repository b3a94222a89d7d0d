#!/usr/bin/env bash
# Session 46's fifth device call (carry [".ab"]): a launch's host cost inside a torch process,
# static against shared CUDA runtime, and the library itself relinked with the shared runtime
# (.ab/shared_rt.so.xz: build-gpu's objects of main's device code, linked with -lcudart instead
# of libcudart_static; f44 is the same code with the static runtime).
#   OUT=$OUT bash benchmarks/results/session46/scripts/round5.sh
#     1. scripts/launch_in_process.py over .ab/launch_{static,shared}.so (both orders), and the
#        plain C++ process (.ab/launch_cost);
#     2. the shared-runtime library: training bounds / capture tests, decode hashes = f44's;
#     3. the chunk GPU files and time_serving_ops.py with the working tree's package (its forward
#        now a dense batch of one: no offsets read back);
#     4. the eager decode step (decode_eager_step.py) and host_breakdown.py, f44 against
#        shared_rt in alternating processes.
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh f44 shared_rt
F=$(L f44)
S=$(L shared_rt)
step launch_in_process 60 python3 scripts/launch_in_process.py "$PWD/.ab/launch_static.so" \
  "$PWD/.ab/launch_shared.so"
step launch_cost 60 ./.ab/launch_cost
step launch_in_process2 60 python3 scripts/launch_in_process.py "$PWD/.ab/launch_shared.so" \
  "$PWD/.ab/launch_static.so"
chk shared_tests 120 env FOLD_ATTENTION_LIBRARY=$S python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py -k "bounds or capture"
for lib in f44 shared_rt; do
  chk dsteps_$lib 60 env FOLD_ATTENTION_LIBRARY=$(L $lib) python3 scripts/decode_hashes.py \
    --depths none,16 --steps 3
done
same_logs dsteps_f44 dsteps_shared_rt "decode hashes, appending steps: f44 vs shared_rt"
chk chunk_tests 200 env FOLD_ATTENTION_LIBRARY=$F python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode_chunk_after_history.py tests/python/test_gpu_decode_pinned_window.py
step serving 120 env FOLD_ATTENTION_LIBRARY=$F python3 scripts/time_serving_ops.py
ES="1,8192,9,3,64;1,4096,64,8,128"
for r in 1 2; do
  for lib in f44 shared_rt; do
    step eager_${lib}_$r 90 env FOLD_ATTENTION_LIBRARY=$(L $lib) python3 scripts/decode_eager_step.py \
      --steps 100 --rounds 5 --shapes "$ES"
    step host_${lib}_$r 90 env FOLD_ATTENTION_LIBRARY=$(L $lib) python3 scripts/host_breakdown.py
  done
done
for f in launch_in_process launch_cost launch_in_process2; do
  echo "-- $f"; cat "$LOGS/$f.log"
done
grep -hE "passed|failed" "$LOGS/shared_tests.log" "$LOGS/chunk_tests.log" | tail -4
grep -v "^\s*$" "$LOGS/serving.log" | head -9
for r in 1 2; do for lib in f44 shared_rt; do
  echo "-- $lib $r"; grep -v "^\s*$" "$LOGS/eager_${lib}_$r.log" | tail -5
  grep -E "forward|total" "$LOGS/host_${lib}_$r.log"
done; done
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
