#!/usr/bin/env bash
# Session 35, round 7 (the session's last device time, ~4 minutes; timings first): library m38 = m37 + HALF's two
# A/B options (FOLD_DECODE_FRONT_HPF, _HCP; off by default) and HALF's shared-memory carveout. The
# forms' and combine bit tests, hashes at B135 with HALF + HCP + HPF forced against the forms off,
# racecheck of the decode smoke (its third B72 case runs HCP's cp.async stages), then the graphed
# A/B of each option and the front's kernel time against m37's (the static stages' cost when off).
#   OUT=$OUT bash benchmarks/results/session35/scripts/round7.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh m38 m37
X=$(L m38)
S="128,4096,32,8,128;256,2048,9,3,64"
for k in HCP HPF; do
  step ab_$k 60 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env FOLD_DECODE_FRONT_$k \
    --values -,1 --rounds 9 --screened-only --shapes "$S"
done
for n in m37 m38; do
  step kt_$n 40 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/decode_kernel_times.py --screened-only \
    --shapes "128,4096,32,8,128"
done
chk forms_tests 90 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging -x \
  tests/python/test_gpu_decode.py -k "front_large_forms or combine_ept"
H="python3 scripts/decode_hashes.py --depths none,16 --quick --repeat 15"
step hB_off 60 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_FRONT_HALF=0 FOLD_DECODE_FRONT_U2=0 $H
step hB_hcp 60 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_FRONT_HALF=1 FOLD_DECODE_FRONT_HCP=1 FOLD_DECODE_FRONT_HPF=1 $H
same_logs hB_hcp hB_off "decode hashes B135 HALF + HCP + HPF = forms off"
chk racecheck 120 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool racecheck --error-exitcode 1 \
  python3 scripts/gpu_smoke.py --decode-only
echo "== round 7 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -h "us (" "$LOGS"/ab_*.log
for f in "$LOGS"/kt*; do echo "## $(basename $f)"; grep -E "graphed|front" "$f"; done
