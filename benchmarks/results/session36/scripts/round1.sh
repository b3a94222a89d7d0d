#!/usr/bin/env bash
# Session 36, round 1: session 35's three prepared patches (HCP, scale-late, ring row sums) and the
# EPT 2 rule's residency from the occupancy calculator, checked together in one library (c4, the
# tree of all four) and timed one by one against main's (m39; hcp1 / sl1 / rs1 are main plus one).
#   OUT=$OUT bash benchmarks/results/session36/scripts/round1.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh c4 m39 hcp1 sl1 rs1
X=$(L c4)
chk decode_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging -x \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_gpu_decode_pages.py
step hash_c4 60 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_hashes.py --depths none,16
step hash_m39 60 env FOLD_ATTENTION_LIBRARY=$(L m39) python3 scripts/decode_hashes.py --depths none,16
same_logs hash_c4 hash_m39 "decode hashes c4 = main"
H="python3 scripts/decode_hashes.py --depths none,16 --quick --repeat 15"
step hB_off 60 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_FRONT_HALF=0 FOLD_DECODE_FRONT_U2=0 $H
step hB_hcp 60 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_FRONT_HALF=1 FOLD_DECODE_FRONT_HCP=1 $H
same_logs hB_hcp hB_off "decode hashes B135 HALF + HCP = forms off"
for tool in racecheck memcheck; do
  chk $tool 150 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool $tool --error-exitcode 1 \
    python3 scripts/gpu_smoke.py --decode-only
done
step ab_hcp 90 env FOLD_ATTENTION_LIBRARY=$(L hcp1) python3 scripts/decode_env_ab.py --env FOLD_DECODE_FRONT_HCP \
  --values -,1 --rounds 9 --shapes "128,4096,32,8,128;96,4096,32,8,128;256,2048,9,3,64"
for n in m39 hcp1; do
  step kth_$n 40 env FOLD_ATTENTION_LIBRARY=$(L $n) FOLD_DECODE_FRONT_HCP=1 python3 scripts/decode_kernel_times.py \
    --screened-only --shapes "128,4096,32,8,128"
done
step kth_c4 40 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_kernel_times.py \
  --screened-only --shapes "128,4096,32,8,128;96,4096,32,8,128"
S="1,32768,32,8,128;1,2048,9,3,64;1,8192,9,3,64;8,16384,32,8,128;32,8192,32,8,128"
i=0
for n in m39 sl1 sl1 m39 m39 sl1; do
  i=$((i + 1))
  step kts${i}_$n 60 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/decode_kernel_times.py --screened-only --shapes "$S"
done
S="32,32768,32,2,128;32,16384,32,2,64;16,16384,24,2,128"
i=0
for n in m39 rs1 rs1 m39 m39 rs1; do
  i=$((i + 1))
  step ktr${i}_$n 60 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/decode_kernel_times.py --dense-only --shapes "$S"
done
echo "== round 1 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -h "us (" "$LOGS"/ab_*.log
for f in "$LOGS"/kt*; do echo "## $(basename $f)"; grep -E "graphed|front|ring|combine" "$f"; done
