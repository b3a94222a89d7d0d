#!/usr/bin/env bash
# Session 47, first device call (carry [".ab"]), library f44 (main's device code):
# 1. session 46's round 7: the chunk GPU file on the final package (the length read once);
# 2. session 38's prepared backward chunk A/B (FOLD_BWD_HB_CHUNK 4 / 2 against the default, the
#    knob being what the prepared rule sets), two processes with the arms in opposite orders;
# 3. the forward's chunk at the non-causal MHA shapes (FOLD_FWD_HB_CHUNK; session 27 saw
#    1.01-1.02 there with chunks of 4 / 6 heads), interleaved, bits compared.
#   OUT=$OUT bash benchmarks/results/session47/scripts/round1.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh f44
F=$(L f44)
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv >> "$OUT/summary.txt"
chk chunk_tests 150 env FOLD_ATTENTION_LIBRARY=$F python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode_chunk_after_history.py
chk sched_test 120 env FOLD_ATTENTION_LIBRARY=$F python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py -k "schedule"
SHB="8,2048,16,16,128;16,1024,32,8,128;8,2048,32,32,64;4,4096,32,8,128"
step bwd_a 150 env FOLD_ATTENTION_LIBRARY=$F FOLD_TIME_SHAPES="$SHB" python3 scripts/time_backward_variants.py \
  default FOLD_BWD_HB_CHUNK=4 FOLD_BWD_HB_CHUNK=2
step bwd_b 150 env FOLD_ATTENTION_LIBRARY=$F FOLD_TIME_SHAPES="$SHB" python3 scripts/time_backward_variants.py \
  FOLD_BWD_HB_CHUNK=2 FOLD_BWD_HB_CHUNK=4 default
step fwd_a 120 env FOLD_ATTENTION_LIBRARY=$F python3 scripts/forward_env_ab.py FOLD_FWD_HB_CHUNK ",4,6,8" \
  8,2048,16,16,128 16,1024,32,8,128 8,2048,32,32,64
step fwd_b 120 env FOLD_ATTENTION_LIBRARY=$F python3 scripts/forward_env_ab.py FOLD_FWD_HB_CHUNK "8,6,4," \
  8,2048,16,16,128 16,1024,32,8,128 8,2048,32,32,64
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
for f in "$LOGS"/bwd_*.log "$LOGS"/fwd_*.log; do echo "-- $(basename $f)"; grep -v "^\s*$" $f | tail -14; done
grep -hE "passed|failed" "$LOGS"/chunk_tests.log "$LOGS"/sched_test.log | tail -4
