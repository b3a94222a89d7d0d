#!/usr/bin/env bash
# Session 33, round 1: session 32's two prepared changes, built together as one library (s33a:
# main da7f5c9 + patches/decode-coarse-bound-prepared.patch + patches/preprocess-zero-rows-
# prepared.patch of session 32), against main's library. Checks: every GPU test on s33a (the
# decode huge-keys tests without the guard premise, the packed/subnormal rare-row preprocess
# test, the shared extreme-input training check), decode hashes and gradient hashes equal to
# main's, sanitizers of the decode smoke, then times: the screened decode kernels (prediction:
# within +-1%) and the preprocess with half its dO rows zero (prediction: s33a at its all-plain
# time, main 1.3-1.6x that).
#   OUT=$OUT bash benchmarks/results/session33/scripts/round1.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s33a main
X=$(L s33a)
chk gpu_tests 330 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging tests/python
for n in s33a main; do
  step hash_$n 150 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/decode_hashes.py --depths none,16
  step grad_$n 150 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/grad_hashes.py
done
if cmp -s <(grep -v "^==" "$LOGS/hash_s33a.log") <(grep -v "^==" "$LOGS/hash_main.log"); then
  echo "== decode hashes s33a = main: same" >> "$OUT/summary.txt"
else
  echo "== decode hashes s33a = main: DIFFER" >> "$OUT/summary.txt"; fail=1
fi
if cmp -s "$LOGS/grad_s33a.log" "$LOGS/grad_main.log"; then
  echo "== grad hashes s33a = main: same" >> "$OUT/summary.txt"
else
  echo "== grad hashes s33a = main: DIFFER" >> "$OUT/summary.txt"; fail=1
fi
for tool in racecheck memcheck synccheck; do
  chk $tool 120 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool $tool --error-exitcode 1 \
    python3 scripts/gpu_smoke.py --decode-only
done
for n in main s33a main s33a; do
  step kt_$n 150 env FOLD_ATTENTION_LIBRARY=$(L $n) $KT "$SH"
  step zero_$n 120 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/preprocess_zero_rows.py
done
echo "== round 1 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep -v "^\.\.\." "$OUT/summary.txt" | tail -70
