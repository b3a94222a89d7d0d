#!/usr/bin/env bash
# Prepared in session 40 (no device was lent): the next session's first device call.
#   m40: main's library (session 39's host checks on the CUDA paths and session 40's C ABI
#        struct with the window and sinks fields: compiled, never run on a GPU);
#   x40: main + patches/window-kernels-prepared.patch + patches/sinks-kernels-prepared.patch
#        (sliding windows in the forward v1.2 / v0 and the backward sync / ws / v0 kernels, and
#        attention sinks in the forward v1.2 / v0, each as separate kernel instances; never run).
# Build both on the CPU machine first (the commit files are what round_common.sh expects):
#   cmake --build build-gpu -j2 --target fold_attention
#   xz -T2 -c build-gpu/libfold_attention.so.0.1.0 > .ab/m40.so.xz; git rev-parse --short HEAD > .ab/m40.commit
#   (a worktree with both patches applied: the same into .ab/x40.*). Carry [".ab"].
#   OUT=$OUT bash benchmarks/results/session40/scripts/round1.sh
# A hang in a new kernel instance is the main risk: every step has a time limit, the GPU tests a
# 120 s watchdog per test.
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh m40 x40
M=$(L m40)
X=$(L x40)
P1=benchmarks/results/session40/patches/window-kernels-prepared.patch
P2=benchmarks/results/session40/patches/sinks-kernels-prepared.patch
# 1. The new kernels' tests first (the patches' Python, tests and scripts applied to the tree).
INC=(--include 'python/*' --include 'tests/*' --include 'scripts/*')
git apply "${INC[@]}" "$P1" && git apply "${INC[@]}" "$P2"
chk win_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -x -p no:logging -s \
  tests/python/test_gpu_window.py tests/python/test_window.py
chk sink_tests 120 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -x -p no:logging -s \
  tests/python/test_gpu_sinks.py tests/python/test_sinks.py
# 2. Sanitizers on the new training calls (gpu_smoke's training part: windows and sinks).
chk new_memcheck 120 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool memcheck --error-exitcode 1 \
  python3 scripts/gpu_smoke.py --training-only
# 3. Calls without a window or sinks: the same bits from both libraries (their kernels' SASS is
#    main's; this checks the launchers' choice of instance).
step hashes_m 60 env FOLD_ATTENTION_LIBRARY=$M python3 scripts/grad_hashes.py
step hashes_x 60 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/grad_hashes.py
same_logs hashes_m hashes_x "no-window gradients m40 vs x40"
step win_timing 120 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/time_window.py
# (last: the slowest; a call cut at its limit still returns the steps before)
chk new_racecheck 120 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool racecheck --error-exitcode 1 \
  python3 scripts/gpu_smoke.py --training-only
git apply -R "${INC[@]}" "$P2" && git apply -R "${INC[@]}" "$P1"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed|error" "$LOGS"/win_tests.log "$LOGS"/sink_tests.log | tail -6
grep -h "bits equal" "$LOGS"/win_tests.log "$LOGS"/sink_tests.log | head -12
tail -8 "$LOGS"/win_timing.log
