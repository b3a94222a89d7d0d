#!/usr/bin/env bash
# Session 48, first device call, from branch wip/c-device-checks (e6ae650: main cfee5e3 + the C
# entry points' device-argument checks). Carry .ab/c47e.*, .ab/m47.*, .ab/fwd_call_host. c47e's
# device code is the branch's (cfee5e3 changed Python only). The whole GPU suite on it (which also
# runs cfee5e3's capture-query test), and the C calls' host cost against main's library.
#   OUT=$OUT bash benchmarks/results/session48/scripts/round1.sh
set -u
cd "$(dirname "$0")/../../../.."
nvidia-smi --query-gpu=index,name,memory.total --format=csv
exec bash benchmarks/results/session47/scripts/next_round_device_checks.sh m47
