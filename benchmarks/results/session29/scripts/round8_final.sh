#!/usr/bin/env bash
# Session 29, round 8 (library m29b: main with FOLD_DECODE_OVERLAP merged, the ring's first-item fetch as in re2): the decode GPU tests
# (the new overlap bit test included), racecheck / memcheck / synccheck of the decode smoke, then
# the published decode protocol (decode, generate, invariance; FlashInfer from .whl, the capture
# from .cache). Everything lands in $OUT/r8.tgz.
#   OUT=$OUT bash benchmarks/results/session29/scripts/round8_final.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh m29b
X=$(L m29b)
R=$(mktemp -d)/r8 && mkdir -p "$R/protocol"
pack() { cp "$OUT/summary.txt" "$R/" 2>/dev/null; tar czf "$OUT/r8.tgz" -C "$(dirname "$R")" r8 -C "$(dirname "$LOGS")" logs; }
chk decode_tests 240 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py
for tool in racecheck memcheck synccheck; do
  chk $tool 120 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool $tool --error-exitcode 1 \
    python3 scripts/gpu_smoke.py --decode-only
done
# The graphed attend, OVERLAP on and off (round 7's comparison; k8 and re2 there).
for lib in m29b; do
  step libs_$lib 100 env FOLD_ATTENTION_LIBRARY=$(L $lib) python3 scripts/decode_env_ab.py --env FOLD_DECODE_OVERLAP \
    --values "-,0" --rounds 5 --dense-only --shapes "1,32768,32,8,128;1,8192,9,3,64;32,8192,32,8,128;128,4096,32,8,128"
  sed "s/^/$lib: /" "$LOGS/libs_$lib.log" | grep "B=" >> "$R/libs.txt"
done
cat "$R/libs.txt" >> "$OUT/summary.txt"
pack
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .whl/*.whl > /dev/null 2>&1
step pr 330 env FOLD_ATTENTION_LIBRARY=$X PYTHONPATH=$PYTHONPATH:/tmp/site FOLD_BENCH_FLASHINFER=1 \
  python3 -m benchmarks.run_all --quick --only decode,generate,invariance --budget-s 220 --out "$R/pr"
find "$R/pr" -name '*.jsonl' -exec cp {} "$R/protocol/" \;
rm -rf "$R/pr"
ls -la "$R/protocol" >> "$OUT/summary.txt"
echo "== round 8 checks failed: $fail" >> "$OUT/summary.txt"
pack
rm -f "$OUT/logs.tgz"
grep -v "^\.\.\." "$OUT/summary.txt" | tail -n 40
