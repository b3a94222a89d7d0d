#!/usr/bin/env bash
# Session 35, round 6: library m37 (main's kernels at the end of the session; no training kernel
# changed since session 33). The training protocol re-run on it (forward and backward, the
# issue's shapes, both masks; the published figures were session 28's), then ncu (full set,
# source counters) of the decode front at B8 L16K (the SMALL / UNROLL form, one group per block)
# and B128 L4K (HALF), for the next session.
#   OUT=$OUT bash benchmarks/results/session35/scripts/round6.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh m37
X=$(L m37)
mkdir -p "$OUT/protocol"
for m in forward backward; do
  step p_$m 150 env FOLD_ATTENTION_LIBRARY=$X python3 -m benchmarks.$m --shapes issue \
    --masks both --flex none --rounds 6 --budget-s 120 --out "$OUT/p_$m" --no-repo-results
  find "$OUT/p_$m" -name '*.jsonl' -exec cp {} "$OUT/protocol/$m.jsonl" \; 2>/dev/null
  rm -rf "$OUT/p_$m"
done
tar czf "$OUT/protocol.tgz" -C "$OUT" protocol && rm -rf "$OUT/protocol"
for c in "b8 8,16384,32,8,128" "b128 128,4096,32,8,128"; do
  set -- $c
  step ncu_$1 100 env FOLD_ATTENTION_LIBRARY=$X ncu --set full --import-source yes \
    --kernel-name "regex:decode_front" --launch-skip 2 --launch-count 1 -f -o "$OUT/front_$1" \
    python3 scripts/decode_kernel_times.py --screened-only --shapes "$2"
  ncu -i "$OUT/front_$1.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip > "$OUT/front_$1.src.csv.gz"
  ncu -i "$OUT/front_$1.ncu-rep" --page details --csv > "$OUT/front_$1.details.csv" 2>/dev/null
  python3 scripts/ncu_stalls.py "$OUT/front_$1.src.csv.gz" 30 > "$OUT/front_$1.stalls.txt" 2>&1
  rm -f "$OUT/front_$1.ncu-rep"
  head -14 "$OUT/front_$1.stalls.txt" >> "$OUT/summary.txt"
done
(cd "$OUT" && tar czf front.tgz front_* && rm -f front_*)
echo "== round 6 checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep -v "^\.\.\." "$OUT/summary.txt" | tail -n 40
