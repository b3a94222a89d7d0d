#!/usr/bin/env bash
# Prepared in session 30, NOT RUN: the eager step's buffers tuple and CUDA stream looked up once
# per step instead of twice (patches/decode-eager-lookups-prepared.patch, `git am` on main at
# e0004bd or later; package only, any library of main, e.g. .ab/f30.so.xz). Prediction: a few us
# per B1 eager step (round 4's cProfile put ~35 us of the 86-91 us step in Python). Run from the
# patched tree; the old package is main's, packed as .ab/oldpkg-main.tar.xz by
#   git archive e0004bd python | xz > .ab/oldpkg-main.tar.xz   (before `git am`)
#   OUT=$OUT bash benchmarks/results/session30/scripts/next_round_eager2.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh f30
X=$(L f30)
OLD=$(mktemp -d) && tar -C "$OLD" -xJf .ab/oldpkg-main.tar.xz
chk decode_tests 300 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python -k "decode or kvcache or cache"
for r in 1 2; do
  step eager_old$r 150 env FOLD_ATTENTION_LIBRARY=$X PYTHONPATH=$OLD/python:$PWD/scripts:$PWD \
    python3 scripts/decode_eager_step.py
  step eager_new$r 150 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_eager_step.py
  for a in old new; do sed "s/^/$a$r: /" "$LOGS/eager_$a$r.log" | grep "B=" >> "$OUT/eager.txt"; done
done
echo "== checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt" "$OUT/eager.txt"
