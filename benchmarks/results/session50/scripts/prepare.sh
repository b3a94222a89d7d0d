#!/usr/bin/env bash
# Run on a machine with nvcc (no GPU needed), from the repository root, before the device call:
#   bash benchmarks/results/session50/scripts/prepare.sh
# Builds the libraries the next call carries, xz-compressed into .ab/ (git-ignored; a new
# checkout has none): s50m, this checkout's main, and s50p, main + the prepared patch
# patches/l2pf-prepared.patch (a small grid's dense ring and split2 ask L2 for their split's rows
# at its start; FOLD_DECODE_L2PF), built in a temporary worktree. Each with its commit file (the
# benchmarks' provenance).
set -euo pipefail
cd "$(dirname "$0")/../../../.."
here=$PWD
mkdir -p .ab
build_lib() {  # build_lib SRC_DIR NAME
  local src=$1 name=$2
  cmake -S "$src" -B "$src/build-ab" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFOLD_ENABLE_CUDA=ON \
    -DFOLD_BUILD_TESTS=OFF >/dev/null
  cmake --build "$src/build-ab" -j"$(nproc)" --target fold_attention >"$src/build-ab/build.log" 2>&1 ||
    { grep -E "error" "$src/build-ab/build.log" | head -20; exit 1; }
  xz -T0 -9 -c "$src/build-ab/libfold_attention.so" >"$here/.ab/$name.so.xz"
  (cd "$src" && git rev-parse --short HEAD) >"$here/.ab/$name.commit"
  echo "$name: $(cat "$here/.ab/$name.commit") $(du -h "$here/.ab/$name.so.xz" | cut -f1)"
}
git diff --quiet HEAD -- src include CMakeLists.txt || { echo "uncommitted device code" >&2; exit 1; }
build_lib "$here" s50m
wt=$(mktemp -d)/l2pf
git worktree add -q --detach "$wt" HEAD
trap 'git worktree remove --force "$wt"' EXIT
(cd "$wt" && git -c user.name=prepare -c user.email=prepare@localhost am -q \
  "$here/benchmarks/results/session50/patches/l2pf-prepared.patch")
build_lib "$wt" s50p
# The patch's GPU test file (main's plus the new test), which next_round.sh puts in place of main's.
cp "$wt/tests/python/test_gpu_decode.py" "$here/.ab/s50p.test_gpu_decode.py"
echo "carry: .ab/s50m.so.xz .ab/s50m.commit .ab/s50p.so.xz .ab/s50p.commit .ab/s50p.test_gpu_decode.py"
