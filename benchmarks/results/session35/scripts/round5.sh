#!/usr/bin/env bash
# Session 35, round 5: library m37 (main's kernels at the end of the session: the swizzled split2
# stage, the front's HALF / U2 forms, the combine's EPT 2). Every GPU test of the suite, then the
# published decode protocol (decode, generate, invariance; FlashInfer from .whl, the capture from
# .ab). Everything lands in $OUT/r5.tgz.
#   OUT=$OUT bash benchmarks/results/session35/scripts/round5.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh m37
X=$(L m37)
mkdir -p .cache/captures
for f in .ab/*.pt.xz; do [ -e "$f" ] && xz -dc "$f" > ".cache/captures/$(basename "${f%.xz}")"; done
R=$(mktemp -d)/r5 && mkdir -p "$R/protocol"
pack() { cp "$OUT/summary.txt" "$R/" 2>/dev/null; tar czf "$OUT/r5.tgz" -C "$(dirname "$R")" r5 -C "$(dirname "$LOGS")" logs; }
chk gpu_suite 330 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging tests/python
pack
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .whl/*.whl > /dev/null 2>&1
step pr 300 env FOLD_ATTENTION_LIBRARY=$X PYTHONPATH=$PYTHONPATH:/tmp/site FOLD_BENCH_FLASHINFER=1 \
  python3 -m benchmarks.run_all --quick --only decode,generate,invariance --budget-s 220 --out "$R/pr"
find "$R/pr" -name '*.jsonl' -exec cp {} "$R/protocol/" \;
rm -rf "$R/pr"
ls -la "$R/protocol" >> "$OUT/summary.txt"
echo "== round 5 checks failed: $fail" >> "$OUT/summary.txt"
pack
rm -f "$OUT/logs.tgz"
grep -v "^\.\.\." "$OUT/summary.txt" | tail -n 30
