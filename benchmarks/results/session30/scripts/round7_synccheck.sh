#!/usr/bin/env bash
# Session 30, round 7: the reduced kernel of scripts/synccheck_named_barrier.cu under synccheck,
# four variants (see its header): does "Divergent thread(s) in block" at a named barrier come
# from the producer threads that exited early (exit3 reports, stay3 does not), from the zeroing
# loop's divergence (even3), or only with three consumers (exit2)?
#   OUT=$OUT bash benchmarks/results/session30/scripts/round7_synccheck.sh
set -u
cd "$(dirname "$0")/../../../.."
B=$(mktemp -d)/snb
nvcc -arch=sm_90a -O3 -o "$B" scripts/synccheck_named_barrier.cu > "$OUT/build.txt" 2>&1
for v in exit3 stay3 exit2 even3 pcs3 pcs3na; do
  timeout 60 compute-sanitizer --tool synccheck --print-limit 1 "$B" $v > "$OUT/sync_$v.txt" 2>&1
  echo "== $v rc=$? $(grep -c 'Barrier error' "$OUT/sync_$v.txt") printed; $(grep 'ERROR SUMMARY' "$OUT/sync_$v.txt" | head -1)" >> "$OUT/summary.txt"
done
cat "$OUT/summary.txt"
