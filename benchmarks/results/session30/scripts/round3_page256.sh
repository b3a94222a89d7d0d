#!/usr/bin/env bash
# Session 30, round 3: the cache's default page size 256 (was 128; round 2's measurement), the
# package's change only (library m30 = main 9830c59, unchanged). Every GPU decode test at the new
# default (the page-size tests included), racecheck / memcheck / synccheck of the decode smoke,
# then the published decode protocol (decode, generate, invariance; FlashInfer from .whl, the
# capture from .cache). Everything lands in $OUT/r3.tgz.
#   OUT=$OUT bash benchmarks/results/session30/scripts/round3_page256.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh m30
X=$(L m30)
# The capture travels xz-compressed in .ab/ (the carry limit): laid into .cache/captures here.
mkdir -p .cache/captures
for f in .ab/*.pt.xz; do [ -e "$f" ] && xz -dc "$f" > ".cache/captures/$(basename "${f%.xz}")"; done
R=$(mktemp -d)/r3 && mkdir -p "$R/protocol"
pack() { cp "$OUT/summary.txt" "$R/" 2>/dev/null; tar czf "$OUT/r3.tgz" -C "$(dirname "$R")" r3 -C "$(dirname "$LOGS")" logs; }
chk decode_tests 300 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python -k "decode or kvcache or cache"
for tool in racecheck memcheck synccheck; do
  chk $tool 120 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool $tool --error-exitcode 1 \
    python3 scripts/gpu_smoke.py --decode-only
done
pack
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .whl/*.whl > /dev/null 2>&1
step pr 330 env FOLD_ATTENTION_LIBRARY=$X PYTHONPATH=$PYTHONPATH:/tmp/site FOLD_BENCH_FLASHINFER=1 \
  python3 -m benchmarks.run_all --quick --only decode,generate,invariance --budget-s 220 --out "$R/pr"
find "$R/pr" -name '*.jsonl' -exec cp {} "$R/protocol/" \;
rm -rf "$R/pr"
ls -la "$R/protocol" >> "$OUT/summary.txt"
echo "== round 3 checks failed: $fail" >> "$OUT/summary.txt"
pack
rm -f "$OUT/logs.tgz"
grep -v "^\.\.\." "$OUT/summary.txt" | tail -n 40
