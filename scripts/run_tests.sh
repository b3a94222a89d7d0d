#!/usr/bin/env bash
# The test command (README): C++ tests (CPU reference and host core, under AddressSanitizer
# and UBSan) through CTest, the C++ example against the installed CMake package, then the
# Python tests on the installed package. GPU tests are
# marked and skip without a GPU; run scripts/gpu_round.sh on a GPU machine for those.
set -euo pipefail
cd "$(dirname "$0")/.."
# The C++ half needs CMake, Ninja, GoogleTest and clang-format: installed here when missing
# (Debian/Ubuntu, as root), so this command works on a fresh machine.
if ! command -v cmake >/dev/null || ! command -v ninja >/dev/null || [ ! -f /usr/include/gtest/gtest.h ] ||
  ! command -v clang-format >/dev/null; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get update -q
    apt-get install -y -q cmake ninja-build libgtest-dev clang-format
  else
    echo "run_tests.sh needs cmake, ninja, GoogleTest and clang-format" \
      "(apt-get install cmake ninja-build libgtest-dev clang-format)" >&2
    exit 1
  fi
fi
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
if ! python3 -c "import fold_attention" 2>/dev/null; then
  echo "fold_attention is not installed: run 'python3 -m pip install \".[test]\"' first" >&2
  exit 1
fi
jobs=$(nproc 2>/dev/null || echo 2)
bash scripts/check_format.sh
cmake -S . -B build-test -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFOLD_ENABLE_CUDA=OFF \
  -DFOLD_SANITIZE=ON -DFOLD_BUILD_TESTS=ON >/dev/null
cmake --build build-test -j"$jobs"
ctest --test-dir build-test --output-on-failure -j"$jobs"
# A C++ user's view: install the library (with the CUDA kernels where nvcc exists), then
# build and run the example against the installed CMake package.
cmake -S . -B build-install -G Ninja -DCMAKE_BUILD_TYPE=Release -DFOLD_BUILD_TESTS=OFF >/dev/null
cmake --build build-install -j"$jobs"
cmake --install build-install --prefix "$PWD/build-install/prefix" >/dev/null
cmake -S examples/cpp -B build-example -G Ninja -DCMAKE_PREFIX_PATH="$PWD/build-install/prefix" >/dev/null
cmake --build build-example -j"$jobs"
./build-example/train_step
./build-example/decode_step
FOLD_ATTENTION_TEST_INSTALLED=1 python3 -m pytest -q tests/python tests/bench
