#!/usr/bin/env bash
# Session 36, round 3: library v8r2 (main: the v8 dense ring, and the planner sending v8 caches at
# D 64 / 128 to it at every depth). Every GPU test of the suite; memcheck of the smoke (its v8
# D 128 G 4 cache keeps v8's screen by FOLD_DECODE_SCREEN=1); the planner's choice timed (v8
# caches at depth 16: the screen kept by FOLD_DECODE_SCREEN=1 against the default, which reads
# every key); then the published decode protocol (decode, generate, invariance; FlashInfer from
# .whl, the capture from .ab). Everything lands in $OUT/r3.tgz.
#   OUT=$OUT bash benchmarks/results/session36/scripts/round3.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh v8r2
X=$(L v8r2)
mkdir -p .cache/captures
for f in .ab/*.pt.xz; do [ -e "$f" ] && xz -dc "$f" > ".cache/captures/$(basename "${f%.xz}")"; done
R=$(mktemp -d)/r3 && mkdir -p "$R/protocol"
pack() { cp "$OUT/summary.txt" "$R/" 2>/dev/null; tar czf "$OUT/r3.tgz" -C "$(dirname "$R")" r3 -C "$(dirname "$LOGS")" logs; }
chk gpu_suite 330 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging tests/python
pack
chk memcheck 60 env FOLD_ATTENTION_LIBRARY=$X compute-sanitizer --tool memcheck --error-exitcode 1 \
  python3 scripts/gpu_smoke.py --decode-only
step ab_planner 120 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py --env FOLD_DECODE_SCREEN \
  --values 1,- --v8 --screened-only --rounds 5 \
  --shapes "1,32768,32,8,128;8,16384,32,8,128;32,8192,32,8,128;128,4096,32,8,128;16,16384,32,4,128;1,8192,9,3,64"
pack
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .whl/*.whl > /dev/null 2>&1
step pr 300 env FOLD_ATTENTION_LIBRARY=$X PYTHONPATH=$PYTHONPATH:/tmp/site FOLD_BENCH_FLASHINFER=1 \
  python3 -m benchmarks.run_all --quick --only decode,generate,invariance --budget-s 220 --out "$R/pr"
find "$R/pr" -name '*.jsonl' -exec cp {} "$R/protocol/" \;
rm -rf "$R/pr"
ls -la "$R/protocol" >> "$OUT/summary.txt"
echo "== round 3 checks failed: $fail" >> "$OUT/summary.txt"
pack
rm -f "$OUT/logs.tgz"
grep -v "^\.\.\." "$OUT/summary.txt" | tail -n 30
grep -h "us (" "$LOGS"/ab_*.log
