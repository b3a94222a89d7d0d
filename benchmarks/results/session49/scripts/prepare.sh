#!/usr/bin/env bash
# Run on a machine with nvcc (no GPU needed), from the repository root, before the device call:
#   bash benchmarks/results/session49/scripts/prepare.sh
# Builds into .ab/ (notes/prepared/build_ab.sh): s49m, this checkout's main, and s49v, main + the
# prepared patch patches/v8-window-ring-split2-prepared.patch (windowed v8 steps on the dense ring
# and split2). Ran in session 50 on c3dd954; the patch is on main since (acd5082), so it no
# longer applies to a later main.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
bash notes/prepared/build_ab.sh s49m s49v \
  benchmarks/results/session49/patches/v8-window-ring-split2-prepared.patch
