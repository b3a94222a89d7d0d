#!/usr/bin/env bash
# Session 19, third and fourth calls: library `new` (main + the persistent dense
# ring: static stride in the third call, items fetched from a counter in the fourth): the ring's bit tests (every
# FOLD_DECODE_RING_BLOCKS against one block per item, the CPU comparisons), the three sanitizers
# on the decode smoke with two ring blocks (many items per block), dense per-kernel times of new
# with its default grid and with one block per item (the old schedule); then, only if every check
# passed and the ring is faster (no shape 1% slower, 1.5% faster on average), the decode
# protocol with `new`.
#   OUT=$OUT bash benchmarks/results/session19/scripts/s19_ring_protocol.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh new
X=$(L new)
fail=0
chk() { step "$@"; tail -n 4 "$OUT/summary.txt" | grep -q "^== $1 rc=0 " || fail=1; }
chk ring_bits 90 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_decode.py -k "ring or matches_cpu or invarian or batch"
for tool in racecheck synccheck memcheck; do
  chk ${tool}_ring2 75 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_RING_BLOCKS=2 compute-sanitizer \
    --tool $tool --error-exitcode 1 python3 scripts/gpu_smoke.py --decode-only
done
DSH="128,4096,32,8,128;32,8192,32,8,128;8,16384,32,8,128;1,32768,32,8,128;16,16384,32,4,128;32,32768,32,2,128;32,16384,16,2,64"
KD="python3 scripts/decode_kernel_times.py --dense-only --shapes"
step kt_dense_new 70 env FOLD_ATTENTION_LIBRARY=$X $KD "$DSH"
step kt_dense_new_b0 70 env FOLD_ATTENTION_LIBRARY=$X FOLD_DECODE_RING_BLOCKS=0 $KD "$DSH"
echo "== ring checks failed: $fail" >> "$OUT/summary.txt"
# The graphed attends, new / one block per item, per shape (kt logs in $LOGS, round_common.sh).
gain=$(python3 - "$LOGS/kt_dense_new.log" "$LOGS/kt_dense_new_b0.log" <<'P' 2>> "$OUT/summary.txt"
import re, sys
t = [dict(re.findall(r"^(B=\S+ L=\S+ H=\S+ D=\S+) depth=None: graphed attend ([0-9.]+) us", open(f).read(), re.M)) for f in sys.argv[1:]]
r = {k: float(t[0][k]) / float(t[1][k]) for k in t[0] if k in t[1]}
for k, v in r.items():
    print(f"   {k}: new / b0 = {v:.3f}", file=sys.stderr)
print(1 if r and max(r.values()) < 1.01 and sum(r.values()) / len(r) < 0.985 else 0)
P
)
echo "== ring faster everywhere (mean gain > 1.5%): ${gain:-0}" >> "$OUT/summary.txt"
if [ $fail != 0 ] || [ "${gain:-0}" != 1 ]; then cat "$OUT/summary.txt"; exit 0; fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .whl/*.whl > /dev/null 2>&1
step pr 250 env FOLD_ATTENTION_LIBRARY=$X PYTHONPATH=$PYTHONPATH:/tmp/site FOLD_BENCH_FLASHINFER=1 \
  python3 -m benchmarks.run_all --quick --only decode,generate,invariance --budget-s 220 --out "$OUT/pr"
mkdir -p "$OUT/protocol" && find "$OUT/pr" -name '*.jsonl' -exec cp {} "$OUT/protocol/" \;
rm -rf "$OUT/pr"
cat "$OUT/summary.txt"
