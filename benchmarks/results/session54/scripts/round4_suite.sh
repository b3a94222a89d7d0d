#!/usr/bin/env bash
# Session 54, round 4: the whole GPU suite on main's device code with the front-overlap patch
# merged (library s54f, built at 7822606; main 057cc33 cherry-picks that commit, so the device code
# is the same). Carrying .ab/s54f.*:  OUT=$OUT bash benchmarks/results/session54/scripts/round4_suite.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s54f
nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/summary.txt"
chk suite 540 env FOLD_ATTENTION_LIBRARY=$(L s54f) python3 -m pytest -q -m gpu -p no:logging tests/python
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep "^==" "$OUT/summary.txt"
grep -hE "passed|failed|FAILED|ERROR" "$LOGS"/suite.log | tail -15
exit $fail
