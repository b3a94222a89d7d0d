#!/usr/bin/env bash
# Session 45's device calls (carry [".ab"]): libraries f44 (main 857d3d3's build: main's device
# code) and c45 (branch wip/decode-cond-pass1: pass 1 in a graph conditional node, statistics on
# demand; .ab/c45.commit).
#   OUT=$OUT bash benchmarks/results/session45/scripts/round1.sh a
#     1. every decode GPU file on c45 (the new graph test with and without flags among them);
#     2. decode hashes f44 = c45 (eager steps, appending, v8, windows with sinks);
#     3. graphed A/B on c45: FOLD_DECODE_COND_PASS1 1 against 0 (dense and depth 16);
#     4. benchmarks/micro/conditional_node.cu (.ab/conditional_node): the boundary alone;
#     5. session 44's touched training GPU files and the serving examples on CUDA (c45).
#   ... round1.sh b
#     6. scripts/host_breakdown.py; time_window.py --graphed on both training routes;
#        scripts/time_serving_ops.py (f44).
set -u
cd "$(dirname "$0")/../../../.."
part=${1:-a}
source notes/prepared/round_common.sh f44 c45
F=$(L f44)
C=$(L c45)
if [ "$part" = a ]; then
  chk dec_tests 240 env FOLD_ATTENTION_LIBRARY=$C python3 -m pytest -q -m gpu -p no:logging \
    tests/python/test_gpu_decode*.py
  step ab_cond 150 env FOLD_ATTENTION_LIBRARY=$C python3 scripts/decode_env_ab.py \
    --env FOLD_DECODE_COND_PASS1 --values "1,0" --rounds 7 \
    --shapes "1,2048,9,3,64;1,8192,9,3,64;1,32768,32,8,128;8,16384,32,8,128;32,8192,32,8,128;128,4096,32,8,128"
  step micro 60 bash -c "./.ab/conditional_node 16 264 && ./.ab/conditional_node 1024 264"
  for lib in f44 c45; do
    chk dsteps_$lib 60 env FOLD_ATTENTION_LIBRARY=$(L $lib) python3 scripts/decode_hashes.py \
      --depths none,16 --steps 3
    chk dsteps8_$lib 60 env FOLD_ATTENTION_LIBRARY=$(L $lib) python3 scripts/decode_hashes.py \
      --depths none,16 --steps 3 --v8
    chk dwin_$lib 60 env FOLD_ATTENTION_LIBRARY=$(L $lib) python3 scripts/decode_hashes.py \
      --window 600 --sinks --depths none,16 --repeat 15
  done
  same_logs dsteps_f44 dsteps_c45 "decode hashes, appending steps: f44 vs c45"
  same_logs dsteps8_f44 dsteps8_c45 "decode hashes, appending steps, v8: f44 vs c45"
  same_logs dwin_f44 dwin_c45 "decode hashes, W600 with sinks: f44 vs c45"
  chk touched 150 env FOLD_ATTENTION_LIBRARY=$C python3 -m pytest -q -m gpu -p no:logging \
    tests/python/test_gpu_kv_bounds.py tests/python/test_gpu_training.py -k "bounds or capture"
  for ex in speculative_decoding prefix_sharing; do
    chk ex_$ex 40 env FOLD_ATTENTION_LIBRARY=$C python3 examples/python/$ex.py --device cuda
  done
  grep -hE "passed|failed" "$LOGS/dec_tests.log" "$LOGS/touched.log" | tail -4
  grep -v "^\s*$" "$LOGS/ab_cond.log" | tail -30
  cat "$LOGS/micro.log"
else
  step host_breakdown 100 env FOLD_ATTENTION_LIBRARY=$F python3 scripts/host_breakdown.py
  for route in 1 0; do
    step graphed_$route 60 env FOLD_ATTENTION_LIBRARY=$F FOLD_EAGER_AUTOGRAD=$route \
      FOLD_WINDOW_CASES="1,8192,64,8,64,128" python3 scripts/time_window.py --graphed
  done
  step serving 150 env FOLD_ATTENTION_LIBRARY=$F python3 scripts/time_serving_ops.py
  for f in host_breakdown graphed_1 graphed_0 serving; do
    echo "-- $f"; grep -v "^\s*$" "$LOGS/$f.log" | tail -24
  done
fi
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
echo "fail=$fail"
