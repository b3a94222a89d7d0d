#!/usr/bin/env bash
# Prepared in session 32, NOT RUN (about 3 minutes of device time): the backward preprocess's
# second pass skips rows of zeros (patches/preprocess-zero-rows-prepared.patch, `git am` on main).
# Why: since session 32 a row whose sum of squares leaves [2^-64, FLT_MAX] sends its block through
# a second, out-of-line pass (row_reduce.h's canonical_norm); a row of zeros (q = 0) did too,
# though its norm is 0 and never raises the max. Loss-masked tokens give zero dO rows in the last
# layer, so such blocks would re-read their dO. The patch flags a row only if q != 0 or one of
# its lanes holds a non-zero element; the bits are those of the CPU reference either way.
# Also in the patch: a GPU test of rare rows in packed requests (zero rows at a request's end, a
# request of huge rows, subnormal rows), run here for the first time.
# Libraries: zr1 (built from the patch) and main, carried as .ab/zr1.so.xz / .ab/main.so.xz with
# their .commit files (notes/prepared/README.md, "Rebuilding"). Carry them in one folder.
# Prediction: with half the rows zero, zr1's preprocess equals its all-plain time; main's is
# ~1.3-1.6x that (its blocks with a zero row read dO twice). Ordinary inputs: equal (+-1%).
#   OUT=$OUT bash benchmarks/results/session32/scripts/next_round_zero_rows.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh zr1 main
X=$(L zr1)
chk preprocess_tests 200 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_preprocess.py tests/python/test_gpu_training.py -k "preprocess or extreme or accuracy or large_dout"
for n in zr1 main; do
  step grad_$n 200 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/grad_hashes.py
  cp "$LOGS/grad_$n.log" "$LOGS/grad_$n.txt"
done
if cmp -s "$LOGS/grad_zr1.txt" "$LOGS/grad_main.txt"; then
  echo "== grad hashes zr1 = main: same" >> "$OUT/summary.txt"
else
  echo "== grad hashes zr1 = main: DIFFER" >> "$OUT/summary.txt"; fail=1
fi
cat > "$LOGS/zero_rows.py" <<'PY'
import statistics, torch
from fold_attention import ops
for zero_frac in (0.0, 0.5):
    B, S, H, Hkv, D = 8, 2048, 16, 16, 128
    g = torch.Generator(device="cuda").manual_seed(0)
    mk = lambda h: torch.randn(B, S, h, D, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v, o, do = mk(Hkv), mk(Hkv), mk(H), mk(H)
    if zero_frac:
        do[:, ::2] = 0  # every other token: loss-masked rows
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
    side = torch.cuda.Stream(); side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        ops.bwd_preprocess(k, v, o, do)
        with torch.cuda.graph(graph, stream=side):
            ops.bwd_preprocess(k, v, o, do)
    torch.cuda.current_stream().wait_stream(side)
    ts = []
    for _ in range(30):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); graph.replay(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    print(f"zero rows {zero_frac:.0%}: {statistics.median(ts):.1f} us")
PY
for n in main zr1 main zr1; do
  step zero_$n 120 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 "$LOGS/zero_rows.py"
  step prep_$n 120 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 -m benchmarks.preprocess
done
echo "== zero-rows round checks failed: $fail" >> "$OUT/summary.txt"
tar czf "$OUT/logs.tgz" -C "$(dirname "$LOGS")" logs
grep -v "^\.\.\." "$OUT/summary.txt" | tail -50
