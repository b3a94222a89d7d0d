#!/usr/bin/env bash
# Run on a machine with nvcc (no GPU needed), from the repository root, before the device call:
#   bash benchmarks/results/session51/scripts/prepare.sh
# Builds into .ab/ (notes/prepared/build_ab.sh): s50m, this checkout's main (round1.sh's large-grid
# baseline and the H200 training call's library), and s51p, main + patches/l2pf-pipe-prepared.patch
# (three commits: session 50's small-grid L2 prefetch, FOLD_DECODE_L2PF, split2's step
# pipelining on small grids, FOLD_DECODE_SPLIT2_PIPE, and their shared helpers), with the patch's
# test_gpu_decode.py (round1.sh puts it in place of main's). Carry for round1.sh: .ab/s51p.so.xz, .ab/s51p.commit,
# .ab/s51p.test_gpu_decode.py, .ab/s50m.so.xz, .ab/s50m.commit.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
bash notes/prepared/build_ab.sh s50m s51p benchmarks/results/session51/patches/l2pf-pipe-prepared.patch \
  tests/python/test_gpu_decode.py
