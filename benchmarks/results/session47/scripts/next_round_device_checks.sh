#!/usr/bin/env bash
# Prepared for the next session (carry .ab/c47e.* and .ab/fwd_call_host; c47e = main 0fa671e's
# device code + `patches/c-device-checks-prepared.patch`, i.e. branch wip/c-device-checks; if
# .ab is gone: `git am` the patch on main, build, xz the library as .ab/c47e.so.xz). The C entry
# points' device-argument checks ran in session 47 rounds 9-11 on the multi-device file and the
# capture / compile tests only (the device budget was spent): here the whole GPU suite on it,
# and its host cost from C against main's library (fwd_call_host, alternating). On a two-GPU
# machine (kind nvidia-h100-x2) the multi-device file's two-device tests also run.
#   OUT=$OUT bash benchmarks/results/session47/scripts/next_round_device_checks.sh MAINLIB
# MAINLIB: main's library name in .ab (e.g. the build of main this session leaves).
set -u
cd "$(dirname "$0")/../../../.."
M=${1:?the name of the main library in .ab}
source notes/prepared/round_common.sh c47e "$M"
E=$(L c47e) B=$(L "$M")
nvidia-smi --query-gpu=index,name --format=csv >> "$OUT/summary.txt"
chk md 120 env FOLD_ATTENTION_LIBRARY=$E python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_multi_device.py
chk gpu_all 330 env FOLD_ATTENTION_LIBRARY=$E python3 -m pytest -q -m gpu -p no:logging tests/python
i=0
for lib in B E B E; do
  i=$((i + 1)); step "fch_${i}_$lib" 30 .ab/fwd_call_host "${!lib}"
done
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed" "$LOGS"/md.log "$LOGS"/gpu_all.log | tail -3
for f in "$LOGS"/fch_*.log; do echo "-- $(basename $f)"; tail -3 $f; done
