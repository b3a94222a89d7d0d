#!/usr/bin/env bash
# Session 48, eighth device call (the machine still warm after round 7; carry .ab/s48s.*): the
# whole GPU suite on s48s, the command as it ran (the tail of its output in round8/gpu_all.log).
#   source notes/prepared/round_common.sh s48s; S=$(L s48s); timeout 230 env FOLD_ATTENTION_LIBRARY=$S \
#     python3 -m pytest -q -m gpu -p no:logging -x tests/python 2>&1 | tail -4 | tee $OUT/gpu_all.log
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s48s
S=$(L s48s)
timeout 230 env FOLD_ATTENTION_LIBRARY=$S python3 -m pytest -q -m gpu -p no:logging -x tests/python 2>&1 |
  tail -4 | tee "$OUT/gpu_all.log"
