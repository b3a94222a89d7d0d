#!/usr/bin/env bash
# The next session's call for patch 0001 (the persistent dense ring, notes/prepared/README.md),
# about 6 minutes. Library, xz-compressed at .ab/ring.so.xz with its commit in .ab/ring.commit:
# ring = main + 0001. Carry .whl and .cache (the protocol's FlashInfer wheels and capture).
# The ring's bit tests, racecheck / synccheck / memcheck of the decode smoke with two ring blocks
# (session 19's counter form drew 4 racecheck reports on its plain header store: this form uses
# relaxed shared atomics), the interleaved graphed A/B of the default against one block per item,
# on full caches and on caches of 8x the length's capacity (7/8 of the items empty); then, if
# every check passed, the decode protocol with ring (judge it by the A/B: merge if D 64 / G 16
# keep their gain and nothing is slower, the spare-capacity case included).
#   OUT=$OUT bash notes/prepared/next_round_ring.sh
set -u
cd "$(dirname "$0")/../.."
source notes/prepared/round_common.sh ring
X=$(L ring)
fail=0
chk() { step "$@"; tail -n 4 "$OUT/summary.txt" | grep -q "^== $1 rc=0 " || fail=1; }
chk ring_bits 90 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py -k "ring or matches_cpu or invarian or batch"
for tool in racecheck synccheck memcheck; do
  chk ${tool}_ring2 75 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_RING_BLOCKS=2 compute-sanitizer \
    --tool $tool --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
done
DSH="128,4096,32,8,128;32,8192,32,8,128;8,16384,32,8,128;1,32768,32,8,128;16,16384,32,4,128;32,32768,32,2,128;32,16384,16,2,64;64,4096,16,2,64"
step ring_ab 120 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_RING_BLOCKS --values "0,-" --dense-only --shapes "$DSH" --rounds 9
cat "$LOGS/ring_ab.log" >> "$OUT/summary.txt"
step ring_ab_spare 120 env FOLD_ATTENTION_LIBRARY=$X python3 scripts/decode_env_ab.py \
  --env FOLD_DECODE_RING_BLOCKS --values "0,-" --dense-only --spare 8 --rounds 7 \
  --shapes "128,4096,32,8,128;32,4096,16,2,64;16,8192,32,2,128"
cat "$LOGS/ring_ab_spare.log" >> "$OUT/summary.txt"
echo "== ring checks failed: $fail" >> "$OUT/summary.txt"
if [ $fail = 0 ] && [ "${RING_PR:-1}" = 1 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .whl/*.whl > /dev/null 2>&1
  step pr 250 env FOLD_ATTENTION_LIBRARY=$X PYTHONPATH=$PYTHONPATH:/tmp/site FOLD_BENCH_FLASHINFER=1 \
    python3 -m benchmarks.run_all --quick --only decode,generate,invariance --budget-s 220 --out "$OUT/pr"
  mkdir -p "$OUT/protocol" && find "$OUT/pr" -name '*.jsonl' -exec cp {} "$OUT/protocol/" \;
  rm -rf "$OUT/pr"
fi
cat "$OUT/summary.txt"
