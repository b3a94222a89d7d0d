#!/usr/bin/env bash
# Session 31, round 1 (carry .ab/r1: libraries m31 = main a080323, ce1 = the combine-early patch,
# dg1 = main + a diagnostic pass-1 skip; newpkg-eager2.tar.xz = the eager-lookups package).
#  1. Every GPU test on main's library (first run since the test helpers moved to
#     decode_helpers.py and the eager step's decode_step_new refactor).
#  2. Session 30's prepared combine-early call (its checks and A/B, trimmed to B1-B8 shapes).
#  3. What pass 1's launch costs in the graphed attend at B1 (dg1, FOLD_DIAG_SKIP_PASS1=1: the
#     upper bound of folding pass 1 into the combine; the output is right when nothing is flagged).
#  4. The eager-lookups package against main's (alternating processes).
#  5. Session 30's round 7 synccheck variants (pcs3 / pcs3na).
#   OUT=$OUT bash benchmarks/results/session31/scripts/round1.sh
set -u
cd "$(dirname "$0")/../../../.."
cp .ab/r1/* .ab/
source notes/prepared/round_common.sh m31 ce1 dg1
M=$(L m31); C=$(L ce1); DG=$(L dg1)
chk gpu_tests 330 env FOLD_ATTENTION_LIBRARY=$M python3 -m pytest -q -m gpu -p no:logging tests/python
chk ce_decode_tests 150 env FOLD_ATTENTION_LIBRARY=$C FOLD_DECODE_COMBINE_EARLY=1 python3 -m pytest \
  -q -m gpu -p no:logging tests/python/test_gpu_decode.py tests/python/test_gpu_decode_pages.py
for v in 0 1; do
  step hash_ce$v 150 env FOLD_ATTENTION_LIBRARY=$C FOLD_DECODE_COMBINE_EARLY=$v python3 \
    scripts/decode_hashes.py --depths none,16
  cp "$LOGS/hash_ce$v.log" "$OUT/hash_ce$v.txt"
done
if cmp -s <(grep -v "^==" "$OUT/hash_ce0.txt") <(grep -v "^==" "$OUT/hash_ce1.txt"); then
  echo "== hashes combine-early 0 = 1: same" >> "$OUT/summary.txt"
else
  echo "== hashes combine-early 0 = 1: DIFFER" >> "$OUT/summary.txt"; fail=1
fi
for tool in racecheck memcheck synccheck; do
  chk ce_$tool 120 env FOLD_ATTENTION_LIBRARY=$C FOLD_DECODE_COMBINE_EARLY=1 compute-sanitizer \
    --tool $tool --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
done
SHP="1,32768,32,8,128;1,2048,9,3,64;1,8192,9,3,64;8,16384,32,8,128"
for o in "-,1" "1,-"; do
  n=ab_ce_${o/,/_}
  step $n 150 env FOLD_ATTENTION_LIBRARY=$C python3 scripts/decode_env_ab.py --env \
    FOLD_DECODE_COMBINE_EARLY --values "$o" --rounds 7 --shapes "$SHP"
  cat "$LOGS/$n.log" >> "$OUT/ab_ce.txt"
done
step ab_skip_p1 150 env FOLD_ATTENTION_LIBRARY=$DG python3 scripts/decode_env_ab.py --env \
  FOLD_DIAG_SKIP_PASS1 --values "-,1" --rounds 7 --shapes "1,32768,32,8,128;1,2048,9,3,64;1,8192,9,3,64;32,8192,32,8,128"
cp "$LOGS/ab_skip_p1.log" "$OUT/ab_skip_p1.txt"
NEW=$(mktemp -d) && tar -C "$NEW" -xJf .ab/newpkg-eager2.tar.xz
for r in 1 2; do
  step eager_old$r 120 env FOLD_ATTENTION_LIBRARY=$M python3 scripts/decode_eager_step.py --rounds 5
  step eager_new$r 120 env FOLD_ATTENTION_LIBRARY=$M PYTHONPATH=$NEW/python:$PWD/scripts:$PWD \
    python3 scripts/decode_eager_step.py --rounds 5
  for a in old new; do sed "s/^/$a$r: /" "$LOGS/eager_$a$r.log" | grep "B=" >> "$OUT/eager.txt"; done
done
chk eager2_tests 120 env FOLD_ATTENTION_LIBRARY=$M PYTHONPATH=$NEW/python:$PWD/scripts:$PWD python3 \
  -m pytest -q -m gpu -p no:logging tests/python/test_decode_api.py tests/python/test_decode_step_checks.py
mkdir -p "$OUT/r7" && OUT=$OUT/r7 timeout 150 bash benchmarks/results/session30/scripts/round7_synccheck.sh > /dev/null 2>&1
cat "$OUT/r7/summary.txt" >> "$OUT/summary.txt"
echo "== round 1 checks failed: $fail" >> "$OUT/summary.txt"
grep -v "^\.\.\." "$OUT/summary.txt" | tail -60; cat "$OUT/ab_ce.txt" "$OUT/ab_skip_p1.txt" "$OUT/eager.txt"
