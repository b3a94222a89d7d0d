#!/usr/bin/env bash
# Prepared in session 43 (no device lent): the next session's first three calls,
#   OUT=$OUT bash benchmarks/results/session43/scripts/next_round.sh a    (training, main's tests)
#   OUT=$OUT bash benchmarks/results/session43/scripts/next_round.sh b    (decode hashes: m43, q43)
#   OUT=$OUT bash benchmarks/results/session43/scripts/next_round.sh c    (q43's tests and timing)
# with carry [".ab"]. Libraries:
#   m43  main's build (07e3dd5; its device code is m42's, cuobjdump: 340 of 340 function bodies
#        identical; the C ABI has fold_kvcache_t.pinned_window, refused on CUDA);
#   q43  m43's source + session42/patches/decode-window-grid-prepared.patch (the windowed split's
#        grid over the window's splits) + session43/patches/decode-pinned-cuda-prepared.patch (the
#        CUDA writers take a cache pinned to its window; branch wip/pinned-cuda). Its Python must
#        be the branch's (the CUDA refusal of a pinned cache removed): part b checks the branch's
#        tests/python/test_gpu_decode_pinned_window.py out into a temporary tree.
# a: 1. host time per training call, both routes and SDPA (scripts/time_host.py);
#    2. gradient hashes: the eager route (FOLD_EAGER_AUTOGRAD=1) = the ops' route = session 41's;
#    3. every GPU test on m43 with the eager route on (the page pool's GPU tests among them);
#    4. narrow training windows: events, per kernel, graphed.
# b: decode hashes m43 = q43: plain caches with appending steps (v8 and not), windows of 100, 600
#    and 2,000 keys with sinks;
# c: 1. q43's decode GPU tests (windows, pages, the pool, multi-token queries, the main decode
#       file) and the pinned cache's GPU tests, with the branch's Python;
#    2. windowed steps per kernel on both libraries.
# If a, b and c pass: flip the eager route's default, land the grid patch and the pinned patch.
set -u
cd "$(dirname "$0")/../../../.."
part=${1:-a}
source notes/prepared/round_common.sh m43 q43
M=$(L m43)
Q=$(L q43)
if [ "$part" = a ]; then
  step host 100 env FOLD_ATTENTION_LIBRARY=$M python3 scripts/time_host.py
  chk hashes_fn 60 env FOLD_ATTENTION_LIBRARY=$M FOLD_EAGER_AUTOGRAD=1 python3 scripts/grad_hashes.py
  chk hashes_ops 60 env FOLD_ATTENTION_LIBRARY=$M FOLD_EAGER_AUTOGRAD=0 python3 scripts/grad_hashes.py
  same_logs hashes_fn hashes_ops "gradient hashes: eager route vs ops route"
  cp benchmarks/results/session42/scripts/hashes_session41.txt "$LOGS/hashes_s41.log"
  same_logs hashes_fn hashes_s41 "gradient hashes: eager route vs session 41 (m40)"
  chk gpu_all 240 env FOLD_ATTENTION_LIBRARY=$M FOLD_EAGER_AUTOGRAD=1 python3 -m pytest -q -m gpu \
    -p no:logging tests/python
  step win_narrow 80 env FOLD_ATTENTION_LIBRARY=$M FOLD_EAGER_AUTOGRAD=1 \
    FOLD_WINDOW_CASES="1,8192,64,8,64,128;2,8192,32,8,128,128" python3 scripts/time_window.py \
    --kernels --graphed
  report="host win_narrow"
  tests="gpu_all"
elif [ "$part" = b ]; then
  for lib in m43 q43; do
    chk dsteps_$lib 60 env FOLD_ATTENTION_LIBRARY=$(L $lib) python3 scripts/decode_hashes.py \
      --depths none,16 --steps 3
    chk dsteps8_$lib 60 env FOLD_ATTENTION_LIBRARY=$(L $lib) python3 scripts/decode_hashes.py \
      --depths none,16 --steps 3 --v8
  done
  same_logs dsteps_m43 dsteps_q43 "decode hashes with appending steps: m43 vs q43"
  same_logs dsteps8_m43 dsteps8_q43 "decode hashes with appending steps, v8: m43 vs q43"
  for w in 100 600 2000; do
    for lib in m43 q43; do
      chk dwin${w}_$lib 60 env FOLD_ATTENTION_LIBRARY=$(L $lib) python3 scripts/decode_hashes.py \
        --window $w --sinks --depths none,16 --repeat 15
    done
    same_logs dwin${w}_m43 dwin${w}_q43 "windowed decode hashes W$w: m43 vs q43"
  done
  report=""
  tests=""
else
  # The branch's Python and tests (the pinned cache accepted on CUDA) in a temporary tree.
  T=$(mktemp -d)/tree && mkdir -p "$T" && cp -r python tests scripts "$T"/
  (cd "$T" && patch -p1 -s < "$OLDPWD"/benchmarks/results/session43/patches/decode-pinned-cuda-python.patch) \
    || { echo "== the branch's Python patch did not apply" >> "$OUT/summary.txt"; fail=1; }
  chk dec_tests_q 240 env FOLD_ATTENTION_LIBRARY=$Q PYTHONPATH=$T/python:$T/scripts python3 -m pytest \
    -q -m gpu -p no:logging "$T"/tests/python/test_gpu_decode_window_sinks.py \
    "$T"/tests/python/test_gpu_decode_pinned_window.py "$T"/tests/python/test_gpu_decode_page_pool.py \
    "$T"/tests/python/test_gpu_decode_pages.py "$T"/tests/python/test_gpu_decode_tokens.py \
    "$T"/tests/python/test_gpu_decode.py
  for lib in m43 q43; do
    step dec_window_$lib 60 env FOLD_ATTENTION_LIBRARY=$(L $lib) \
      FOLD_DECODE_WINDOW_CASES="1,8192,64,8,64,128;32,8192,64,8,64,128;32,8192,32,8,128,4096" \
      python3 scripts/time_decode_window.py --kernels
  done
  report="dec_window_m43 dec_window_q43"
  tests="dec_tests_q"
fi
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
for f in $tests; do grep -hE "passed|failed" "$LOGS/$f.log" | tail -2; done
for f in $report; do
  echo "-- $f"; grep -v "^\s*$" "$LOGS/$f.log" | tail -36
done
echo "fail=$fail"
