#!/usr/bin/env bash
# Prepared in session 42 (device loans paused after its first call): the next session's first
# call. Library m42 (main 7d16767's build: no kernel or C++ change since)
# and x42 (m42's source + session42/patches/decode-window-grid-prepared.patch: the windowed decode
# step's split grid over the window's splits only; build it with the patch applied).
# The Python change under test: eager training calls take an autograd.Function instead of the
# custom ops' dispatch (training.py's _EagerAttention, FOLD_EAGER_AUTOGRAD=1; off by default until
# this run: if it passes, the default flips).
#   1. host time per call, both routes and SDPA (scripts/time_host.py);
#   2. gradient hashes: eager route = ops route = session 41's (m40, round 1);
#   3. x42: windowed decode hashes = m42's (windows of 100, 600 and 2000 keys, sinks, depth none
#      and 16, B 135), the decode window GPU tests; both libraries' windowed step kernels;
#   4. every GPU test on m42 with the eager route on;
#   5. narrow training windows again (events now with less host time), their kernel split and
#      every arm graphed (fold against FlexAttention without either's host time).
# Carry [".ab"] (m42.so.xz, m42.commit, x42.so.xz, x42.commit).
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh m42 x42
M=$(L m42)
X=$(L x42)
step host 100 env FOLD_ATTENTION_LIBRARY=$M python3 scripts/time_host.py
chk hashes_fn 60 env FOLD_ATTENTION_LIBRARY=$M FOLD_EAGER_AUTOGRAD=1 python3 scripts/grad_hashes.py
chk hashes_ops 60 env FOLD_ATTENTION_LIBRARY=$M FOLD_EAGER_AUTOGRAD=0 python3 scripts/grad_hashes.py
same_logs hashes_fn hashes_ops "gradient hashes: eager route vs ops route"
cp benchmarks/results/session42/scripts/hashes_session41.txt "$LOGS/hashes_s41.log"
same_logs hashes_fn hashes_s41 "gradient hashes: eager route vs session 41 (m40)"
for w in 100 600 2000; do
  for lib in m42 x42; do
    chk dwin${w}_$lib 60 env FOLD_ATTENTION_LIBRARY=$(L $lib) python3 scripts/decode_hashes.py \
      --window $w --sinks --depths none,16 --repeat 15
  done
  same_logs dwin${w}_m42 dwin${w}_x42 "windowed decode hashes W$w: m42 vs x42"
done
chk dec_win_tests_x 120 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu \
  tests/python/test_gpu_decode_window_sinks.py
for lib in m42 x42; do
  step dec_window_$lib 60 env FOLD_ATTENTION_LIBRARY=$(L $lib) \
    FOLD_DECODE_WINDOW_CASES="1,8192,64,8,64,128;32,8192,64,8,64,128;32,8192,32,8,128,4096" \
    python3 scripts/time_decode_window.py --kernels
done
chk gpu_all 200 env FOLD_ATTENTION_LIBRARY=$M FOLD_EAGER_AUTOGRAD=1 python3 -m pytest -q -m gpu -p no:logging tests/python
step win_narrow 80 env FOLD_ATTENTION_LIBRARY=$M FOLD_EAGER_AUTOGRAD=1 \
  FOLD_WINDOW_CASES="1,8192,64,8,64,128;2,8192,32,8,128,128" python3 scripts/time_window.py --kernels \
  --graphed
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed" "$LOGS"/gpu_all.log "$LOGS"/dec_win_tests_x.log | tail -4
for f in host dec_window_m42 dec_window_x42 win_narrow; do
  echo "-- $f"; grep -v "^\s*$" "$LOGS/$f.log" | tail -36
done
echo "fail=$fail"
