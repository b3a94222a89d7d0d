#!/usr/bin/env bash
# Session 33, round 3: library s33c (main with the coarse-error rule, the parallel max and the
# front's new rows-per-block rule). Every decode GPU test, racecheck / memcheck / synccheck of
# the decode smoke, an A/B of the new front rule against one row per block (FOLD_DECODE_FRONT_FORM
# "1s", the old default at these shapes), then the published decode protocol (decode, generate,
# invariance; FlashInfer from .whl, the capture from .ab). Everything lands in $OUT/r3.tgz.
#   OUT=$OUT bash benchmarks/results/session33/scripts/round3.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh s33c
X=$(L s33c)
mkdir -p .cache/captures
for f in .ab/*.pt.xz; do [ -e "$f" ] && xz -dc "$f" > ".cache/captures/$(basename "${f%.xz}")"; done
R=$(mktemp -d)/r3 && mkdir -p "$R/protocol"
pack() { cp "$OUT/summary.txt" "$R/" 2>/dev/null; tar czf "$OUT/r3.tgz" -C "$(dirname "$R")" r3 -C "$(dirname "$LOGS")" logs; }
chk decode_tests 300 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python -k "decode or kvcache or cache or guard"
for tool in racecheck memcheck synccheck; do
  chk $tool 120 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool $tool --error-exitcode 1 \
    python3 scripts/gpu_smoke.py --decode-only
done
step front_ab 200 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_FRONT_FORM --values "-,1s" --rounds 9 \
  --shapes "32,32768,32,2,128;16,16384,32,4,128;8,16384,32,8,128;128,4096,32,8,128"
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
grep -v Warn "$LOGS/front_ab.log" | tail -12
