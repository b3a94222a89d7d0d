#!/usr/bin/env bash
# Fails if any tracked C/C++/CUDA file differs from clang-format's output (.clang-format).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null; then
  echo "clang-format is not installed (apt-get install clang-format)" >&2
  exit 1
fi
git ls-files '*.c' '*.cpp' '*.h' '*.cu' '*.cuh' | xargs clang-format --dry-run --Werror
echo "format: ok"
