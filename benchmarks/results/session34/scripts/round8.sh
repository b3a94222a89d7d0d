#!/usr/bin/env bash
# Session 34, round 8: library g2 (branch gather: split2's value gathers by rows at D >= 128;
# D 64's SASS equal to main's, D 128's to round 7's g1 up to the order of two independent
# instructions). The decode GPU tests, decode hashes against round 7's fma1 log (main's bits),
# then the published decode protocol (decode, generate, invariance; FlashInfer from .whl, the
# capture from .ab). Everything lands in $OUT/r8.tgz.
#   OUT=$OUT bash benchmarks/results/session34/scripts/round8.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh g2
X=$(L g2)
mkdir -p .cache/captures
for f in .ab/*.pt.xz; do [ -e "$f" ] && xz -dc "$f" > ".cache/captures/$(basename "${f%.xz}")"; done
R=$(mktemp -d)/r8 && mkdir -p "$R/protocol"
pack() { cp "$OUT/summary.txt" "$R/" 2>/dev/null; tar czf "$OUT/r8.tgz" -C "$(dirname "$R")" r8 -C "$(dirname "$LOGS")" logs; }
chk decode_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py tests/python/test_decode_planner.py tests/python/test_gpu_decode_pages.py
step hash_g2 150 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_hashes.py --depths none,16
cp benchmarks/results/session34/round7/logs/hash_fma1.log "$LOGS/hash_fma1.log"
same_logs hash_g2 hash_fma1 "decode hashes g2 = fma1 (round 7)"
pack
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .whl/*.whl > /dev/null 2>&1
step pr 300 env FOLD_ATTENTION_LIBRARY=$X PYTHONPATH=$PYTHONPATH:/tmp/site FOLD_BENCH_FLASHINFER=1 \
  python3 -m benchmarks.run_all --quick --only decode,generate,invariance --budget-s 220 --out "$R/pr"
find "$R/pr" -name '*.jsonl' -exec cp {} "$R/protocol/" \;
rm -rf "$R/pr"
ls -la "$R/protocol" >> "$OUT/summary.txt"
echo "== round 8 checks failed: $fail" >> "$OUT/summary.txt"
pack
rm -f "$OUT/logs.tgz"
grep -v "^\.\.\." "$OUT/summary.txt" | tail -n 30
