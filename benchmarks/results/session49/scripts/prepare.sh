#!/usr/bin/env bash
# Run on a machine with nvcc (no GPU needed), from the repository root, before the device call:
#   bash benchmarks/results/session49/scripts/prepare.sh
# Builds the two libraries the next calls carry, xz-compressed into .ab/ (git-ignored; a new
# checkout has none, so this is the step that makes them): s49m, this checkout's main (the device
# code of main at the end of session 49), and s49v, main + the prepared patch
# patches/v8-window-ring-split2-prepared.patch (windowed v8 steps on the dense ring and split2),
# built in a temporary worktree. Each with its commit file (the benchmarks' provenance).
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
build_lib "$here" s49m
wt=$(mktemp -d)/v8win
git worktree add -q --detach "$wt" HEAD
trap 'git worktree remove --force "$wt"' EXIT
(cd "$wt" && git -c user.name=prepare -c user.email=prepare@localhost am -q \
  "$here/benchmarks/results/session49/patches/v8-window-ring-split2-prepared.patch")
build_lib "$wt" s49v
echo "carry: .ab/s49m.so.xz .ab/s49m.commit .ab/s49v.so.xz .ab/s49v.commit"
