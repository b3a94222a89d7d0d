#!/usr/bin/env bash
# Run on a machine with nvcc (no GPU needed), from the repository root, before the device call:
#   bash benchmarks/results/session50/scripts/prepare.sh
# Builds into .ab/ (notes/prepared/build_ab.sh): s50m, this checkout's main (the training call's
# library), and s50p, main + patches/l2pf-prepared.patch (a small grid's dense ring and split2 ask
# L2 for their split's rows at its start; FOLD_DECODE_L2PF), with the patch's test_gpu_decode.py
# (next_round.sh puts it in place of main's). Carry for next_round.sh: .ab/s50p.so.xz,
# .ab/s50p.commit, .ab/s50p.test_gpu_decode.py; for the training call: .ab/s50m.*.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
bash notes/prepared/build_ab.sh s50m s50p benchmarks/results/session50/patches/l2pf-prepared.patch \
  tests/python/test_gpu_decode.py
