#!/usr/bin/env bash
# Session 35, round 2: library m35 = main with the swizzled split2 stage (round 1) and the front's
# 128-thread form at large batch (FOLD_DECODE_FRONT_HALF, default on where groups >= SMs, G <= 4).
# Decode GPU tests (the new HALF bit test among them), hashes against round 8's g2 (small batch:
# nothing changes there) and HALF off / on at B135 (--repeat 15), racecheck / memcheck of the decode
# smoke (its new B72 case runs the HALF front), then the graphed A/B of HALF and the kernel times.
#   OUT=$OUT bash benchmarks/results/session35/scripts/round2.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh m35
X=$(L m35)
chk decode_tests 150 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging -x \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_gpu_decode_pages.py
step hash_m35 60 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_hashes.py --depths none,16
cp benchmarks/results/session34/round8/logs/hash_g2.log "$LOGS/hash_g2.log"
same_logs hash_m35 hash_g2 "decode hashes m35 = g2 (round 8)"
step hashB_on 90 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_hashes.py --depths none,16 --quick --repeat 15
step hashB_off 90 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_FRONT_HALF=0 python3 scripts/decode_hashes.py --depths none,16 --quick --repeat 15
same_logs hashB_on hashB_off "decode hashes B135 HALF on = off"
for tool in racecheck memcheck; do
  chk $tool 90 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool $tool --error-exitcode 1 \
    python3 scripts/gpu_smoke.py --decode-only
done
S="128,4096,32,8,128;32,8192,32,8,128;64,8192,32,8,128;128,2048,9,3,64;32,8192,9,3,64;16,16384,32,8,128"
step ab_half 200 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env FOLD_DECODE_FRONT_HALF \
  --values 1,0 --shapes "$S"
for v in 1 0; do
  step kt_half$v 60 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_FRONT_HALF=$v python3 scripts/decode_kernel_times.py \
    --screened-only --shapes "128,4096,32,8,128;32,8192,32,8,128"
done
echo "== round 2 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -h "us (" "$LOGS/ab_half.log"
for f in "$LOGS"/kt*; do echo "## $(basename $f)"; grep -E "graphed|front" "$f"; done
