#!/usr/bin/env bash
# Session 54, round 6 (as run, inline on the warm device after round 5; carrying .ab/s54s.*): the
# whole GPU suite on library s54s (the front's shape from every warp's registers).
set -u
mkdir -p .gpu-libs/s54s && xz -dc .ab/s54s.so.xz > .gpu-libs/s54s/libfold_attention.so &&
  cp .ab/s54s.commit .gpu-libs/s54s/commit &&
  PYTHONPATH=$PWD/python:$PWD/scripts:$PWD FOLD_ATTENTION_LIBRARY=$PWD/.gpu-libs/s54s/libfold_attention.so \
    timeout 400 python3 -m pytest -q -m gpu -p no:logging tests/python > "$OUT/suite_s54s.log" 2>&1
echo rc=$?; tail -3 "$OUT/suite_s54s.log"
