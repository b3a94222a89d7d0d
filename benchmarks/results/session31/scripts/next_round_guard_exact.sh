#!/usr/bin/env bash
# Prepared in session 31, NOT RUN (about 4 minutes of device time): the guard's second pass takes Z
# over the fine logits and cuts nothing (patches/decode-guard-second-pass-exact-prepared.patch,
# `git am` on main; the CPU reference and the kernels together). Why: keys of huge norm put a
# row's heaviest key's coarse logit 100+ binades below its fine one; the screen cut it, and the
# old fix-up (Z over coarse logits, the cut kept) ended with T = 0: output 0, LSE -inf, no error
# (notes/decode.md section 40, traced on the CPU reference). CPU tests pass with it (a new one fails
# on main's library and passes with the patch).
# Libraries: ge1 (built from the patch) and main (built from main), carried as .ab/ge1.so.xz /
# .ab/main.so.xz with their .commit files (notes/prepared/README.md, "Rebuilding").
# Checks: every decode GPU test (the guard tests compare pass 1's bits with the CPU reference; the
# new huge-keys test), hashes of unflagged steps equal to main's (nothing changes without a flag),
# sanitizers of the decode smoke (it has a flagged group), and the guard's worst case against
# main's (the second pass now reads every key's planes and values: the rare path may be slower).
#   OUT=$OUT bash benchmarks/results/session31/scripts/next_round_guard_exact.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh ge1 main
X=$(L ge1); M=$(L main)
chk decode_tests 240 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python -k "decode or cache or guard"
for n in ge1 main; do
  step hash_$n 150 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/decode_hashes.py --depths none,16
  cp "$LOGS/hash_$n.log" "$OUT/hash_$n.txt"
done
if cmp -s <(grep -v "^==" "$OUT/hash_ge1.txt") <(grep -v "^==" "$OUT/hash_main.txt"); then
  echo "== hashes ge1 = main: same" >> "$OUT/summary.txt"
else
  echo "== hashes ge1 = main: DIFFER" >> "$OUT/summary.txt"; fail=1
fi
for tool in racecheck memcheck synccheck; do
  chk $tool 120 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool $tool --error-exitcode 1 \
    python3 scripts/gpu_smoke.py --decode-only
done
for n in ge1 main; do
  step worst_b8_$n 150 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/decode_guard_worst.py 8 32768 32 8 128
  step worst_b1_$n 150 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/decode_guard_worst.py 1 32768 32 8 128
done
echo "== guard-exact round checks failed: $fail" >> "$OUT/summary.txt"
grep -v "^\.\.\." "$OUT/summary.txt" | tail -40
