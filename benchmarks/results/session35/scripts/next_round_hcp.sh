#!/usr/bin/env bash
# Prepared in session 35, NOT RUN: `session35/patches/decode-front-hcp-prepared.patch` (`git am`
# on main; build it as .ab/hcp1.so.xz, main's as .ab/m37.so.xz, each with its .commit;
# notes/prepared/README.md says how). HALF's sample tiles staged by cp.async two deep, in their own
# instance (FOLD_DECODE_FRONT_HCP=1; the plain HALF instance's ptxas report is main's). Round 7's
# first version raced (its copy loop ran over 2 D pieces per tile, not D: racecheck, the forms
# bit test and the hashes all caught it) and cost the default path its occupancy (static stages in
# the shared instance); both are fixed here, compiled only. The forms' bit test, hashes at B135
# (HALF + HCP against the forms off), racecheck of the decode smoke (its third B72 case runs HCP),
# then the graphed A/B of HCP and the front's kernel time against main's library.
# Prediction: HALF's front at B128 L4K 31-32 -> 22-26 us (its eight serial tile loads per warp
# overlapped in pairs), the attend -1 to -2%.
#   OUT=$OUT bash benchmarks/results/session35/scripts/next_round_hcp.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh hcp1 m37
X=$(L hcp1)
chk forms_tests 120 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging -x \
  tests/python/test_gpu_decode.py -k "front_large_forms or combine_ept"
H="python3 scripts/decode_hashes.py --depths none,16 --quick --repeat 15"
step hB_off 60 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_FRONT_HALF=0 FOLD_DECODE_FRONT_U2=0 $H
step hB_hcp 60 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_FRONT_HALF=1 FOLD_DECODE_FRONT_HCP=1 $H
same_logs hB_hcp hB_off "decode hashes B135 HALF + HCP = forms off"
chk racecheck 150 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool racecheck --error-exitcode 1 \
  python3 scripts/gpu_smoke.py --decode-only
step ab_hcp 90 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env FOLD_DECODE_FRONT_HCP \
  --values -,1 --rounds 9 --shapes "128,4096,32,8,128;96,4096,32,8,128;256,2048,9,3,64"
for n in m37 hcp1; do
  step kt_$n 40 env FOLD_ATTENTION_LIBRARY=$(L $n) FOLD_DECODE_FRONT_HCP=1 python3 scripts/decode_kernel_times.py \
    --screened-only --shapes "128,4096,32,8,128"
done
echo "== hcp round checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -h "us (" "$LOGS"/ab_*.log
for f in "$LOGS"/kt*; do echo "## $(basename $f)"; grep -E "graphed|front" "$f"; done
