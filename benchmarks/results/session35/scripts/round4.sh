#!/usr/bin/env bash
# Session 35, round 4: library m37 = round 3's m36 + the combine at two elements per thread where
# one per thread would take more than one wave (FOLD_DECODE_COMBINE_EPT). Decode GPU tests (its
# bit test), hashes against round 8's g2 and, at B135, the rule / EPT 1 / EPT 2 forced, racecheck /
# memcheck of the decode smoke (its B72 cases force EPT 2 and HALF), the graphed A/B of EPT
# against 1 where the rule picks 2, and of the front's small-batch forms (FOLD_DECODE_FRONT_FORM
# 2su / 4su: rows per block at small batch, no code change) against the launcher's pick.
#   OUT=$OUT bash benchmarks/results/session35/scripts/round4.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh m37
X=$(L m37)
chk decode_tests 150 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging -x \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_gpu_decode_pages.py
step hash_m37 60 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_hashes.py --depths none,16
cp benchmarks/results/session34/round8/logs/hash_g2.log "$LOGS/hash_g2.log"
same_logs hash_m37 hash_g2 "decode hashes m37 = g2 (round 8)"
H="python3 scripts/decode_hashes.py --depths none,16 --quick --repeat 15"
step hB_rule 90 env FOLD_ATTENTION_LIBRARY=$X $H
step hB_e1 90 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_COMBINE_EPT=1 $H
step hB_e2 90 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_COMBINE_EPT=2 $H
same_logs hB_rule hB_e1 "decode hashes B135 rule = EPT 1"
same_logs hB_e2 hB_e1 "decode hashes B135 EPT 2 = EPT 1"
cp benchmarks/results/session35/round3/logs/hB_off.log "$LOGS/hB_off_r3.log"
same_logs hB_e1 hB_off_r3 "decode hashes B135 EPT 1 = round 3's forms off"
for tool in racecheck memcheck; do
  chk $tool 120 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool $tool --error-exitcode 1 \
    python3 scripts/gpu_smoke.py --decode-only
done
step ab_ept 200 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env FOLD_DECODE_COMBINE_EPT \
  --values -,1 --rounds 9 --shapes "128,4096,32,8,128;96,4096,32,8,128;128,2048,32,8,128"
step ab_form 200 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env FOLD_DECODE_FRONT_FORM \
  --values -,2su,4su --rounds 9 --shapes "8,16384,32,8,128;16,16384,32,4,128;12,16384,32,8,128;16,8192,9,3,64"
step kt_ept 60 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_kernel_times.py --screened-only \
  --shapes "128,4096,32,8,128"
step kt_ept1 60 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_COMBINE_EPT=1 python3 scripts/decode_kernel_times.py \
  --screened-only --shapes "128,4096,32,8,128"
echo "== round 4 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -h "us (" "$LOGS"/ab_*.log
for f in "$LOGS"/kt*; do echo "## $(basename $f)"; grep -E "graphed|front|combine" "$f"; done
