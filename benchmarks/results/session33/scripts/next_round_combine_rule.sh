#!/usr/bin/env bash
# Prepared in session 33, NOT RUN (no device time was left): patches/decode-combine-rule-prepared.patch
# (`git am` on main; build it as .ab/s33e.so.xz, main's as .ab/s33d.so.xz, each with its .commit).
# Library s33e: main + the combine's 32-split rule where its grid exceeds three blocks per SM.
# The combine / front / ring bit tests, decode hashes against s33d (= main's code), the rule
# against a forced 64 (B32 L32K G 16 takes 32; B1 L32K and B8 L16K keep 64), then an ncu profile
# of the dense ring at G 16 for the next session.
#   OUT=$OUT bash benchmarks/results/session33/scripts/next_round_combine_rule.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s33e s33d
X=$(L s33e)
chk bit_tests 120 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py -k "combine_batch or front_form or ring_schedule or matches_cpu"
for n in s33e s33d; do
  step hash_$n 150 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/decode_hashes.py --depths none,16
done
same_logs hash_s33e hash_s33d "decode hashes s33e = s33d"
step combine_rule 120 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_COMBINE_BATCH --values "-,64" --rounds 9 \
  --shapes "32,32768,32,2,128;1,32768,32,8,128;8,16384,32,8,128"
# The front's SMALL instance at 8 rows where groups >= SMs (round 4's unrun item).
step front8s 120 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_FRONT_FORM --values "-,8s" --rounds 9 \
  --shapes "128,4096,32,8,128;64,4096,16,4,64"
step ncu_g16 150 env FOLD_ATTENTION_LIBRARY=$X ncu -k regex:decode_split_ring --launch-skip 3 \
  --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
  --section WarpStateStats --section Occupancy --section LaunchStats \
  python3 scripts/profile_decode_step.py 32 32768 32 2 128 dense
echo "== combine-rule round checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep -v "^\.\.\." "$OUT/summary.txt" | tail -24
grep -v Warn "$LOGS/combine_rule.log" "$LOGS/front8s.log" | tail -12
