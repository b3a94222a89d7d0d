#!/usr/bin/env bash
# Run on a machine with nvcc (no GPU needed), from the repository root, before next_round.sh:
#   bash benchmarks/results/session52/scripts/prepare.sh
# Builds into .ab/ (notes/prepared/build_ab.sh): s52m, this checkout's main, and s52pd, main +
# patches/pair-prepared.patch (three commits: split2's PAIR form, forced by
# FOLD_DECODE_SPLIT2_PAIR=1, PAIR as the default where split2's grid is at most one block per SM,
# and a review's changes), with the patch's test_gpu_decode.py (next_round.sh puts it in place of main's).
set -euo pipefail
cd "$(dirname "$0")/../../../.."
bash notes/prepared/build_ab.sh s52m s52pd benchmarks/results/session52/patches/pair-prepared.patch \
  tests/python/test_gpu_decode.py
