#!/usr/bin/env bash
# Builds the libraries a prepared device call carries, on a machine with nvcc (no GPU needed),
# from the repository root:
#   bash notes/prepared/build_ab.sh MAIN_NAME [PATCHED_NAME PATCH [FILE...]]
# MAIN_NAME: this checkout's committed device code, as .ab/MAIN_NAME.so.xz (xz-compressed; .ab/ is
# git-ignored, so a new checkout has none) with its commit in .ab/MAIN_NAME.commit (the
# benchmarks' provenance). PATCHED_NAME: the same with PATCH applied by `git am` in a temporary
# worktree; each FILE (a path in the repository) is copied from that worktree to
# .ab/PATCHED_NAME.<file name>, for a call that needs the patch's version of it (a test file).
set -euo pipefail
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
build_lib "$here" "$1"
[ $# -ge 3 ] || exit 0
name=$2 patch=$3
shift 3
wt=$(mktemp -d)/patched
git worktree add -q --detach "$wt" HEAD
trap 'git worktree remove --force "$wt"' EXIT
(cd "$wt" && git -c user.name=prepare -c user.email=prepare@localhost am -q "$here/$patch")
build_lib "$wt" "$name"
for f in "$@"; do cp "$wt/$f" "$here/.ab/$name.$(basename "$f")"; done
