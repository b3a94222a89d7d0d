#!/usr/bin/env bash
# Prepared in session 32, NOT RUN (about 5 minutes of device time): the decode screen's per-key
# coarse-error rule (patches/decode-coarse-bound-prepared.patch, two commits, `git am` on main).
# Why: a row can lose its heaviest key to the coarse logit's error while the guard does not flag
# it (keys 2048 x randn: one row 1.31 off the dense output; notes/decode.md section 41). The rule:
# E per query row from its planes' L1 norms (planes.h, coarse_error_from_l1; the front writes it
# to the workspace), and a key with sk * max_g E_g > 1 log2 unit is live and refined whatever its
# coarse logit says (CPU reference, split_item, the opt-in screened split, split2). On ordinary
# caches the bound is ~0.1-0.2 and no verdict changes: on the SmolLM2 capture the CPU reference
# gave identical live fractions, bytes and errors (284 steps per layer, depth 16 and 12).
# Libraries: cb1 (built from the patch) and main, carried as .ab/cb1.so.xz / .ab/main.so.xz with
# their .commit files, in one folder (notes/prepared/README.md, "Rebuilding").
# Checks: every decode GPU test (the huge-keys tests now compare outputs with no guard premise;
# the strict-xfail CPU test becomes a plain test in the patch), hashes of ordinary steps equal to
# main's (no verdict changes there), sanitizers of the decode smoke, and the screened kernels'
# times against main's (the front's E and the per-key rule: prediction within +-1%).
#   OUT=$OUT bash benchmarks/results/session32/scripts/next_round_coarse_bound.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh cb1 main
X=$(L cb1)
chk decode_tests 300 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python -k "decode or cache or guard or kvcache"
for n in cb1 main; do
  step hash_$n 150 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/decode_hashes.py --depths none,16
  cp "$LOGS/hash_$n.log" "$LOGS/hash_$n.txt"
done
if cmp -s <(grep -v "^==" "$LOGS/hash_cb1.txt") <(grep -v "^==" "$LOGS/hash_main.txt"); then
  echo "== hashes cb1 = main: same" >> "$OUT/summary.txt"
else
  echo "== hashes cb1 = main: DIFFER" >> "$OUT/summary.txt"; fail=1
fi
for tool in racecheck memcheck synccheck; do
  chk $tool 120 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool $tool --error-exitcode 1 \
    python3 scripts/gpu_smoke.py --decode-only
done
for n in main cb1 main cb1; do
  step kt_$n 150 env FOLD_ATTENTION_LIBRARY=$(L $n) $KT "$SH"
done
echo "== coarse-bound round checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep -v "^\.\.\." "$OUT/summary.txt" | tail -60
