#!/usr/bin/env bash
# Prepared for the next session (carry .ab/s48s.*: its device code is main's at the end of session
# 48; if .ab is gone, build main and xz the library as .ab/s48s.so.xz with its commit file). The
# window tests' last two functions were changed after session 48's last device call (the cache's
# workspace filled with NaN before every arm; each arm checks with torch.profiler that it
# launched the kernel it means): they have not run on a GPU. Then the whole GPU suite, as the
# check that main is green on the device.
#   OUT=$OUT bash benchmarks/results/session48/scripts/next_round.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s48s
S=$(L s48s)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/summary.txt"
chk win_new 150 env FOLD_ATTENTION_LIBRARY=$S python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode_window_sinks.py -k "ring_schedules or split2_same_bits"
chk gpu_all 330 env FOLD_ATTENTION_LIBRARY=$S python3 -m pytest -q -m gpu -p no:logging tests/python
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed" "$LOGS"/win_new.log "$LOGS"/gpu_all.log | tail -2
