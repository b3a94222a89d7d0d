#!/usr/bin/env bash
# Session 23, round 1. (a) The forward's 176-key blocks at D 128 non-causal (library `fwd`,
# opt-in FOLD_FWD_BLOCK_N=176): training GPU tests (default, and the D 128 accuracy /
# invariance tests again with 176 set for the whole process), memcheck and racecheck of the
# training smoke with 176, and the forward protocol A/B (graphed, L2 flushed, one process) on
# the issue's shapes, non-causal (causal is unchanged). (b) Session 22's unrun round 3: the
# decode ring with its consumers doing no arithmetic (library `diag`, FOLD_DIAG=1) against the
# full ring, per-kernel times; the 3-D V box, L2 promotion and L2 prefetch A/Bs (library `wi2`).
#   OUT=$OUT bash benchmarks/results/session23/scripts/round1_bn176_diag.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh fwd wi2 diag
F=$(L fwd); W=$(L wi2); DG=$(L diag)
chk train_tests 200 env FOLD_ATTENTION_LIBRARY=$F python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py
chk train_176 200 env FOLD_ATTENTION_LIBRARY=$F FOLD_FWD_BLOCK_N=176 python3 -m pytest -q -m gpu \
  -p no:logging tests/python/test_gpu_training.py -k "128 and (accuracy or request or dense_equals or nonfinite or strided or repeats)"
for tool in memcheck racecheck; do
  chk ${tool}_176 120 env FOLD_ATTENTION_LIBRARY=$F FOLD_FWD_BLOCK_N=176 compute-sanitizer --tool $tool \
    --error-exitcode 1 python3 scripts/gpu_smoke.py --training-only
done
step fwd_ab 200 env FOLD_ATTENTION_LIBRARY=$F FOLD_BENCH_VARIANTS=FOLD_FWD_BLOCK_N=176 python3 -m benchmarks.forward \
  --shapes issue --masks full --flex none --rounds 6 --budget-s 120 --out "$OUT/ab" --no-repo-results
find "$OUT/ab" -name '*.jsonl' -exec cp {} "$OUT/ab_forward.jsonl" \; 2>/dev/null
python3 scripts/ab_table.py "$OUT/ab_forward.jsonl" > "$OUT/ab_table.txt" 2>&1
rm -rf "$OUT/ab"
cat "$OUT/ab_table.txt" >> "$OUT/summary.txt"
# (b) Decode. Per-kernel times of the diagnostic library: full consumers, no-arithmetic
# consumers (default stages and 4 stages).
SD="128,4096,32,8,128;32,8192,32,8,128;1,32768,32,8,128;64,4096,16,4,64"
step kt_dg0 150 env FOLD_ATTENTION_LIBRARY=$DG python3 scripts/decode_kernel_times.py --dense-only --shapes "$SD"
step kt_dg1 150 env FOLD_ATTENTION_LIBRARY=$DG FOLD_DIAG=1 python3 scripts/decode_kernel_times.py --dense-only --shapes "$SD"
step kt_dg1s4 150 env FOLD_ATTENTION_LIBRARY=$DG FOLD_DIAG=1 FOLD_DECODE_RING_STAGES=4 python3 scripts/decode_kernel_times.py --dense-only --shapes "$SD"
for k in kt_dg0 kt_dg1 kt_dg1s4; do echo "== $k" >> "$OUT/summary.txt"; grep -E "^B=|ring" "$LOGS/$k.log" >> "$OUT/summary.txt"; done
chk checks_wi2 240 env FOLD_ATTENTION_LIBRARY=$W python3 -m pytest -q -m "gpu or not gpu" -p no:logging \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_decode_step_checks.py
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
echo "== round 1 checks failed: $fail" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
