#!/usr/bin/env bash
# Session 42, second device call. Library m42 (main 7d16767's build: no kernel or C++ change since).
# The Python change under test: eager training calls take an autograd.Function instead of the
# custom ops' dispatch (training.py's _EagerAttention; FOLD_EAGER_AUTOGRAD=0 the ops' route).
#   1. host time per call, both routes and SDPA (scripts/time_host.py);
#   2. gradient hashes: eager route = ops route = session 41's (m40, round 1);
#   3. every GPU test (the training tests now take the eager route);
#   4. narrow windows again (events now with less host time), and their kernel split;
#   5. the windowed decode step's kernels (time_decode_window.py --kernels).
# Carry [".ab"] (m42.so.xz, m42.commit).
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh m42
M=$(L m42)
step host 120 env FOLD_ATTENTION_LIBRARY=$M python3 scripts/time_host.py
chk hashes_fn 60 env FOLD_ATTENTION_LIBRARY=$M FOLD_EAGER_AUTOGRAD=1 python3 scripts/grad_hashes.py
chk hashes_ops 60 env FOLD_ATTENTION_LIBRARY=$M FOLD_EAGER_AUTOGRAD=0 python3 scripts/grad_hashes.py
same_logs hashes_fn hashes_ops "gradient hashes: eager route vs ops route"
cp benchmarks/results/session42/scripts/hashes_session41.txt "$LOGS/hashes_s41.log"
same_logs hashes_fn hashes_s41 "gradient hashes: eager route vs session 41 (m40)"
chk gpu_all 240 env FOLD_ATTENTION_LIBRARY=$M python3 -m pytest -q -m gpu -p no:logging tests/python
step win_narrow 90 env FOLD_ATTENTION_LIBRARY=$M \
  FOLD_WINDOW_CASES="1,8192,64,8,64,128;2,8192,32,8,128,128" python3 scripts/time_window.py --kernels
step dec_window_kernels 60 env FOLD_ATTENTION_LIBRARY=$M \
  FOLD_DECODE_WINDOW_CASES="1,8192,64,8,64,128;32,8192,64,8,64,128" \
  python3 scripts/time_decode_window.py --kernels
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed" "$LOGS"/gpu_all.log | tail -3
for f in host win_narrow dec_window_kernels; do echo "-- $f"; grep -v "^\s*$" "$LOGS/$f.log" | tail -40; done
echo "fail=$fail"
