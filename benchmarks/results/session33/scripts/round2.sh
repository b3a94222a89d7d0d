#!/usr/bin/env bash
# Session 33, round 2. Library s33b (main + grid_scale's double path for an underflowed b_ds +
# FOLD_DECODE_FRONT_FORM + the group's max coarse error loaded in parallel) against s33a (round
# 1's) and main (da7f5c9's code, before the coarse-error rule).
# 1. Bits: the new front-form test (every form = the default, dense and screened), the training
#    GPU tests and gradient hashes equal to s33a's (grid_scale's rare path changes no ordinary bit).
# 2. The front's form at groups < SMs (today one row per block: 1,024 blocks at B32 G16):
#    graphed interleaved attend, arms default / 2s / 4s / 8s / 8su / 8. Prediction: at G 16 and
#    G 8 (B32 L32K H 32/2, B16 L16K H 32/4) 8su or 4s cuts the front's ~20 µs chain to ~10 and
#    the attend by 2-4%; at B1 no gain (the default is already one row per block, unrolled).
#   OUT=$OUT bash benchmarks/results/session33/scripts/round2.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s33b s33a main
X=$(L s33b)
chk front_form_test 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py -k "front_form"
chk training_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py tests/python/test_gpu_preprocess.py
for n in s33b s33a; do
  step grad_$n 150 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/grad_hashes.py
done
if cmp -s "$LOGS/grad_s33b.log" "$LOGS/grad_s33a.log"; then
  echo "== grad hashes s33b = s33a: same" >> "$OUT/summary.txt"
else
  echo "== grad hashes s33b = s33a: DIFFER" >> "$OUT/summary.txt"; fail=1
fi
for n in s33b s33a; do
  step hash_$n 150 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/decode_hashes.py --depths none,16
done
if cmp -s <(grep -v "^==" "$LOGS/hash_s33b.log") <(grep -v "^==" "$LOGS/hash_s33a.log"); then
  echo "== decode hashes s33b = s33a: same" >> "$OUT/summary.txt"
else
  echo "== decode hashes s33b = s33a: DIFFER" >> "$OUT/summary.txt"; fail=1
fi
# 3. The coarse-error rule's cost with the parallel max: screened kernels, main / s33a / s33b.
for n in main s33a s33b s33b s33a main; do
  step kt_$n 150 env FOLD_ATTENTION_LIBRARY=$(L $n) $KT "$SH"
  cp "$LOGS/kt_$n.log" "$LOGS/kt_${n}_$(date +%s).log"
done
step front_ab 420 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_FRONT_FORM --values "-,2s,4s,8s,8su,8" --rounds 7 \
  --shapes "32,32768,32,2,128;16,16384,32,4,128;8,16384,32,8,128;1,32768,32,8,128;1,8192,9,3,64"
echo "== round 2 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep -v "^\.\.\." "$OUT/summary.txt" | tail -40
cat "$LOGS/front_ab.log" | grep -v Warn | tail -20
