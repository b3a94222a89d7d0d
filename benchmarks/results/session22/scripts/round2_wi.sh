#!/usr/bin/env bash
# Session 22, round 2: the dense ring's warp-independent consumers (library `wi`: main + the WI
# form at G <= 8, FOLD_DECODE_RING_WI=0 for the barrier form; `main` = e615dbd). Decode GPU tests
# with WI; output / LSE hashes of main, of wi with WI=0 (must equal main's) and of wi (WI);
# the sanitizers on the smoke (2 fetching blocks; also 2 stages at D 64); graphed interleaved A/B
# of WI against the barrier form; per-kernel times.
#   OUT=$OUT bash benchmarks/results/session22/scripts/round2_wi.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh main wi
M=$(L main); W=$(L wi)
chk checks 240 env FOLD_ATTENTION_LIBRARY=$W python3 -m pytest -q -m "gpu or not gpu" -p no:logging \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_decode_step_checks.py
H="python3 scripts/decode_hashes.py --depths none,16"
step h_main 120 env FOLD_ATTENTION_LIBRARY=$M $H
step h_wi0 120 env FOLD_ATTENTION_LIBRARY=$W FOLD_DECODE_RING_WI=0 $H
step h_wi 120 env FOLD_ATTENTION_LIBRARY=$W $H
step h_wi_s2 120 env FOLD_ATTENTION_LIBRARY=$W FOLD_DECODE_RING_STAGES=2 FOLD_DECODE_RING_FULL=0 $H
if diff -q "$LOGS/h_main.log" "$LOGS/h_wi0.log" > /dev/null; then echo "== hashes wi0 = main" >> "$OUT/summary.txt";
else echo "== hashes wi0 DIFFER from main" >> "$OUT/summary.txt"; fail=1; fi
if diff -q "$LOGS/h_wi.log" "$LOGS/h_wi_s2.log" > /dev/null; then echo "== hashes wi_s2 = wi" >> "$OUT/summary.txt";
else echo "== hashes wi_s2 DIFFER from wi" >> "$OUT/summary.txt"; fail=1; fi
diff "$LOGS/h_main.log" "$LOGS/h_wi.log" | head -40 >> "$OUT/summary.txt"
for tool in racecheck memcheck synccheck; do
  chk ${tool} 150 env FOLD_ATTENTION_LIBRARY=$W FOLD_DECODE_RING_BLOCKS=2 compute-sanitizer --tool $tool \
    --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
done
chk racecheck_s2 150 env FOLD_ATTENTION_LIBRARY=$W FOLD_DECODE_RING_BLOCKS=2 FOLD_DECODE_RING_STAGES=2 \
  compute-sanitizer --tool racecheck --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
S="1,32768,32,8,128;8,16384,32,8,128;32,8192,32,8,128;128,4096,32,8,128;1,8192,9,3,64;32,16384,16,2,64;64,4096,16,4,64"
step wi_ab 240 env FOLD_ATTENTION_LIBRARY=$W python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_RING_WI --values "0,-" --dense-only --rounds 7 --shapes "$S"
cat "$LOGS/wi_ab.log" >> "$OUT/summary.txt"
step kt_wi 120 env FOLD_ATTENTION_LIBRARY=$W python3 scripts/decode_kernel_times.py --dense-only --shapes "$S"
tail -n 30 "$LOGS/kt_wi.log" >> "$OUT/summary.txt"
echo "== round 2 checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
