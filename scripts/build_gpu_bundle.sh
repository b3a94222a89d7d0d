#!/usr/bin/env bash
# Builds, on a machine with nvcc (no GPU needed), everything a GPU round needs, into the
# git-ignored folder .gpu/: the shared library, the C++ test binary and the ptxas report.
# Then run scripts/gpu_round.sh on the GPU machine with .gpu carried along.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-gpu
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFOLD_ENABLE_CUDA=ON \
  -DFOLD_PTXAS_VERBOSE=ON -DFOLD_BUILD_TESTS=ON >/dev/null
# Resource report of every kernel: rebuild the CUDA objects so ptxas prints it.
find "$build" -name '*.cu.o' -delete
# A failed build must stop here: copying the previous build's library on would label a stale
# library with this commit.
if ! cmake --build "$build" -j"$(nproc)" >"$build/build.log" 2>&1; then
  grep -E "error|warning" "$build/build.log" | head -40
  echo "build failed: no bundle (full log: $build/build.log)" >&2
  exit 1
fi
grep -E "error|warning" "$build/build.log" || true
mkdir -p .gpu
grep -E "ptxas info|bytes stack|spill" "$build/build.log" >.gpu/ptxas.txt || true
cp "$build"/libfold_attention.so.0.1.0 .gpu/libfold_attention.so
cp "$build"/tests/cpp/fold_tests .gpu/fold_tests
git rev-parse --short HEAD >.gpu/commit 2>/dev/null || echo unknown >.gpu/commit
git diff --quiet 2>/dev/null || echo "+dirty" >>.gpu/commit
echo "bundle ready in .gpu/ ($(du -sh .gpu | cut -f1)); ptxas report:"
cat .gpu/ptxas.txt
