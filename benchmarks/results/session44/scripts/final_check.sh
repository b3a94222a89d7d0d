#!/usr/bin/env bash
# Session 44's last call (carry [".ab"]): main's final library f44 (.ab/f44.so.xz: the landed
# window grid and pinned CUDA writers, the relaxed pinned-window check), then
#   1. the GPU files this session touched or enabled: the chunk after a history (a pinned CUDA
#      cache's narrower windows among them), truncate, the pinned cache, the K / V bounds spy on
#      both training routes, the training capture tests;
#   2. the serving examples on CUDA caches;
#   3. time_window.py --graphed on the narrow window, eager route then ops' route (the script
#      now captures fresh leaves after a side-stream warm-up);
#   4. scripts/time_serving_ops.py: a chunk after a history against n steps, a recomputed
#      prompt and SDPA; truncate's host time.
#   OUT=$OUT bash benchmarks/results/session44/scripts/final_check.sh [quick]   (quick: 1 and 2)
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh f44
F=$(L f44)
quick=${1:-}
chk gpu_touched 120 env FOLD_ATTENTION_LIBRARY=$F python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode_chunk_after_history.py tests/python/test_gpu_decode_truncate.py \
  tests/python/test_gpu_decode_pinned_window.py tests/python/test_gpu_kv_bounds.py \
  tests/python/test_gpu_training.py -k "chunk or truncate or cut or pinned or bounds or capture or spec"
for ex in speculative_decoding prefix_sharing; do
  chk ex_$ex 30 env FOLD_ATTENTION_LIBRARY=$F python3 examples/python/$ex.py --device cuda
done
[ -n "$quick" ] && routes="" || routes="1 0"
for route in $routes; do
  step graphed_$route 45 env FOLD_ATTENTION_LIBRARY=$F FOLD_EAGER_AUTOGRAD=$route \
    FOLD_WINDOW_CASES="1,8192,64,8,64,128" python3 scripts/time_window.py --graphed
done
[ -z "$quick" ] && step serving 150 env FOLD_ATTENTION_LIBRARY=$F python3 scripts/time_serving_ops.py
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed" "$LOGS/gpu_touched.log" | tail -2
tail -n 1 "$LOGS"/ex_*.log
for f in ${routes:+graphed_1 graphed_0 serving}; do echo "-- $f"; grep -v "^\s*$" "$LOGS/$f.log" | tail -14; done
echo "fail=$fail"
