#!/usr/bin/env bash
# Session 37, round 5: library s37e (main's device code, = s37d; the decode suite now also runs the
# capture's request repeated over a batch of 32 at 8K, per layer). The published decode protocol
# (decode, generate, invariance; FlashInfer from .whl, the capture from .ab). Everything lands in
# $OUT/r5.tgz.
#   OUT=$OUT bash benchmarks/results/session37/scripts/round5.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s37e
X=$(L s37e)
mkdir -p .cache/captures
for f in .ab/*.pt.xz; do [ -e "$f" ] && xz -dc "$f" > ".cache/captures/$(basename "${f%.xz}")"; done
R=$(mktemp -d)/r5 && mkdir -p "$R/protocol"
pack() { cp "$OUT/summary.txt" "$R/" 2>/dev/null; tar czf "$OUT/r5.tgz" -C "$(dirname "$R")" r5 -C "$(dirname "$LOGS")" logs; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .whl/*.whl > /dev/null 2>&1
step pr 420 env FOLD_ATTENTION_LIBRARY=$X PYTHONPATH=$PYTHONPATH:/tmp/site FOLD_BENCH_FLASHINFER=1 \
  python3 -m benchmarks.run_all --quick --only decode,generate,invariance --budget-s 300 --out "$R/pr"
find "$R/pr" -name '*.jsonl' -exec cp {} "$R/protocol/" \;
rm -rf "$R/pr"
ls -la "$R/protocol" >> "$OUT/summary.txt"
echo "== round 5 checks failed: $fail" >> "$OUT/summary.txt"
pack
rm -f "$OUT/logs.tgz"
grep -v "^\.\.\." "$OUT/summary.txt" | tail -n 30
grep -h "fastest" "$LOGS"/pr.log | tail -20
