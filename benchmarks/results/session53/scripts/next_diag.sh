#!/usr/bin/env bash
# Prepared in session 53 (its device time ran out): where the B1 front's and split2's cycles go,
# phase by phase. Library s54d: main 09ba306 + patches/diag-phases-prepared.patch (a diagnostic
# build, never merged: thread 0's clock64 at each phase boundary, printed by block (0, 0, 0) of
# every 64th launch of the front and of split2's PAIR form). Session 53 built it as .ab/s54d (from
# branch wip/diag-phases); if .ab/ has none, here first (no GPU, ~25 minutes):
#   bash notes/prepared/build_ab.sh s54m s54d benchmarks/results/session53/patches/diag-phases-prepared.patch
# then on the device, carrying .ab/s54d.so.xz and .ab/s54d.commit:
#   OUT=$OUT bash benchmarks/results/session53/scripts/next_diag.sh
# Front phases: wait (PDL), L (length, heavy keys), plan, slots, keyrows (page table, scales),
# quant (q rows), tiles (the sample's MMAs), z, tail. split2: prologue (before the PDL wait),
# wait-to-ready (q fragments, Z, the first plane A), each pair's screen+gather+weights (sg) and
# flush+value (fv), post (page means, accumulators), partial (the partial's writes, statistics).
# Cycles at the SM clock. OVERLAP 0 (each kernel's own time) and the default (OVERLAP on: the
# front's wait and split2's prologue then include the predecessor's).
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s54d
X=$(L s54d)
nvidia-smi --query-gpu=name --format=csv,noheader >> "$OUT/summary.txt"
S="1,128,9,3,64;1,2048,9,3,64;1,8192,9,3,64;1,4096,32,8,128"
for ov in 0 1; do
  step diag_ov$ov 90 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_OVERLAP=$ov \
    python3 scripts/decode_kernel_times.py --screened-only --shapes "$S"
done
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
for f in "$LOGS"/diag_*.log; do echo "-- $(basename $f)"; grep -E "graphed|FOLD_DIAG" $f | head -60; done
