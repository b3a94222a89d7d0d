#!/usr/bin/env bash
# Prepared in session 33, NOT RUN: session 33's two prepared calls in one device call (one machine
# start instead of two; about 6 minutes). Carry .ab/ with pf1, s33e and s33d (.so.xz + .commit;
# notes/prepared/README.md says how to build each).
#   OUT=$OUT bash benchmarks/results/session33/scripts/next_round_both.sh
set -u
D="$(dirname "$0")"
mkdir -p "$OUT/l2pf" "$OUT/rule"
OUT="$OUT/l2pf" bash "$D/next_round_l2pf.sh"
OUT="$OUT/rule" bash "$D/next_round_combine_rule.sh"
