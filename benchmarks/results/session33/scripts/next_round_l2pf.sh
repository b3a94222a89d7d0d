#!/usr/bin/env bash
# Prepared in session 33, NOT RUN (about 3 minutes of device time): patches/decode-l2-prefetch-
# prepared.patch (`git am` on main; build it as .ab/pf1.so.xz, main's as .ab/s33d.so.xz, each with
# its .commit). FOLD_DECODE_L2PF = N (default 0, read per call): while the front computes Z (the
# ring's consumers and split2's weights wait for it, and the DRAM is nearly idle: at B1 L32K the
# front takes ~10 µs of a ~66 µs dense step), the dense ring's producer prefetches N chunks of its
# first item past its stages into L2 (cp.async.bulk.prefetch.tensor), and split2 its split's plane
# B and V rows (cp.async.bulk.prefetch). A hint only: no value depends on it.
# Prediction: B1 L32K dense -5 to -12% (up to ~34 MB L2-resident when the consumers start), the
# captures' shape (B1 L2K / L8K H 9/3 D 64, depth 16: split2) -5 to -15%, B8 and up within +-1%
# (or worse: session 23 found steady-state L2 prefetch 7-34% slower at D 128).
#   OUT=$OUT bash benchmarks/results/session33/scripts/next_round_l2pf.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh pf1 s33d
X=$(L pf1)
for v in 0 8; do
  step hash_pf$v 150 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_L2PF=$v python3 scripts/decode_hashes.py \
    --depths none,16
done
step hash_main 150 env FOLD_ATTENTION_LIBRARY=$(L s33d) python3 scripts/decode_hashes.py --depths none,16
same_logs hash_pf0 hash_pf8 "decode hashes pf1 L2PF 0 = 8"
same_logs hash_pf0 hash_main "decode hashes pf1 L2PF 0 = main"
chk decode_tests 200 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_L2PF=8 python3 -m pytest -q -m gpu \
  -p no:logging tests/python/test_gpu_decode.py
step l2pf_ab 300 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_L2PF --values "-,2,4,8,16" --rounds 9 \
  --shapes "1,32768,32,8,128;1,8192,9,3,64;1,2048,9,3,64;8,16384,32,8,128;128,4096,32,8,128"
echo "== l2pf round checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep -v "^\.\.\." "$OUT/summary.txt" | tail -24
grep -v Warn "$LOGS/l2pf_ab.log" | tail -12
