#!/usr/bin/env bash
# Session 22, round 3 (library `wi2`): the WI ring at D 128 with V as one 3-D box of whole rows
# (FOLD_DECODE_RING_WI: 0 barrier form, 1 WI with two panel boxes, default 2 at D 128) and the
# rings' L2 promotion (FOLD_DECODE_L2PROMO). Decode GPU tests; hashes of WI 1 and WI 2 (same
# arithmetic: must be equal); sanitizers; graphed interleaved A/B of both variables.
#   OUT=$OUT bash benchmarks/results/session22/scripts/round3_wi2.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh wi2 diag
W=$(L wi2); DG=$(L diag)
chk checks 240 env FOLD_ATTENTION_LIBRARY=$W python3 -m pytest -q -m "gpu or not gpu" -p no:logging \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_decode_step_checks.py
H="python3 scripts/decode_hashes.py --depths none,16"
step h_wi1 120 env FOLD_ATTENTION_LIBRARY=$W FOLD_DECODE_RING_WI=1 $H
step h_wi2 120 env FOLD_ATTENTION_LIBRARY=$W $H
if diff -q "$LOGS/h_wi1.log" "$LOGS/h_wi2.log" > /dev/null; then echo "== hashes wi2 = wi1" >> "$OUT/summary.txt";
else echo "== hashes wi2 DIFFER from wi1" >> "$OUT/summary.txt"; fail=1; fi
for tool in racecheck memcheck; do
  chk ${tool} 150 env FOLD_ATTENTION_LIBRARY=$W FOLD_DECODE_RING_BLOCKS=2 compute-sanitizer --tool $tool \
    --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
done
S="1,32768,32,8,128;8,16384,32,8,128;32,8192,32,8,128;128,4096,32,8,128"
step wi_ab 240 env FOLD_ATTENTION_LIBRARY=$W python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_RING_WI --values "0,1,-" --dense-only --rounds 7 --shapes "$S"
cat "$LOGS/wi_ab.log" >> "$OUT/summary.txt"
S2="$S;1,8192,9,3,64;64,4096,16,4,64"
step promo_ab 240 env FOLD_ATTENTION_LIBRARY=$W FOLD_DECODE_RING_WI=0 python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_L2PROMO --values "-,128,0" --dense-only --rounds 7 --shapes "$S2"
cat "$LOGS/promo_ab.log" >> "$OUT/summary.txt"
step pf_ab 240 env FOLD_ATTENTION_LIBRARY=$W python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_RING_PF --values "-,2,4" --dense-only --rounds 7 --shapes "$S2"
cat "$LOGS/pf_ab.log" >> "$OUT/summary.txt"
step blocks_ab 200 env FOLD_ATTENTION_LIBRARY=$W python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_RING_BLOCKS --values "-,264,132" --dense-only --rounds 7 --shapes "128,4096,32,8,128;32,8192,32,8,128"
cat "$LOGS/blocks_ab.log" >> "$OUT/summary.txt"
# Diagnostic library (not for merge): FOLD_DIAG=1 makes the WI consumers only wait for each stage
# and release it (no arithmetic): the ring's streaming rate without its consumers. Per-kernel
# times (the ring kernel's own), default stages and 4 stages at D 128 (one block per SM).
SD="128,4096,32,8,128;32,8192,32,8,128;1,32768,32,8,128;64,4096,16,4,64"
step kt_dg0 150 env FOLD_ATTENTION_LIBRARY=$DG python3 scripts/decode_kernel_times.py --dense-only --shapes "$SD"
step kt_dg1 150 env FOLD_ATTENTION_LIBRARY=$DG FOLD_DIAG=1 python3 scripts/decode_kernel_times.py --dense-only --shapes "$SD"
step kt_dg1s4 150 env FOLD_ATTENTION_LIBRARY=$DG FOLD_DIAG=1 FOLD_DECODE_RING_STAGES=4 python3 scripts/decode_kernel_times.py --dense-only --shapes "$SD"
for k in kt_dg0 kt_dg1 kt_dg1s4; do echo "== $k" >> "$OUT/summary.txt"; grep -E "^B=|ring" "$LOGS/$k.log" >> "$OUT/summary.txt"; done
echo "== round 3 checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
