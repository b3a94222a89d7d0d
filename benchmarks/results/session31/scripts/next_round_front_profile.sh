#!/usr/bin/env bash
# Prepared in session 31, NOT RUN (about 3 minutes of device time): where the decode front's time
# goes. At B1 it is the step's critical path: ~9 µs of a 21-29 µs captures step, and the ring or
# split2 consumers wait for its Z. At B128 it is ~37-44 µs of the dense step (notes/decode.md
# sections 33, 34, 40). Session 31 showed that removing a launch saves nothing unless a
# dependency goes with it. So the front's own chain is the B1 lever: its dependent loads (the
# length and heavy list, the sample's page-table rows, then scales and key planes), its barriers,
# and the q quantisation and Z's arg-max rounds.
# ncu with source counters, one front launch per shape, and the stall summary per SASS line
# (scripts/ncu_stalls.py). scripts/ncu_source_lines.py maps it to source lines afterwards, on the
# CPU, with the same library.
# Library: main's (any commit since a080323 has session 30's decode code), built and carried as
# .ab/main.so.xz + .ab/main.commit (see notes/prepared/README.md). Carry .ab as one folder.
#   OUT=$OUT bash benchmarks/results/session31/scripts/next_round_front_profile.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh main
M=$(L main)
for c in "b1d64 1,8192,9,3,64" "b1d128 1,32768,32,8,128" "b128 128,4096,32,8,128"; do
  set -- $c
  step ncu_$1 200 env FOLD_ATTENTION_LIBRARY=$M ncu --set full --import-source yes \
    --kernel-name "regex:decode_front" --launch-skip 2 --launch-count 1 -f -o "$OUT/front_$1" \
    python3 scripts/decode_kernel_times.py --dense-only --shapes "$2"
  ncu -i "$OUT/front_$1.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip > "$OUT/front_$1.src.csv.gz"
  ncu -i "$OUT/front_$1.ncu-rep" --page details --csv > "$OUT/front_$1.details.csv" 2>/dev/null
  python3 scripts/ncu_stalls.py "$OUT/front_$1.src.csv.gz" 30 > "$OUT/front_$1.stalls.txt" 2>&1
  rm -f "$OUT/front_$1.ncu-rep"
  head -20 "$OUT/front_$1.stalls.txt" >> "$OUT/summary.txt"
done
cat "$OUT/summary.txt"
