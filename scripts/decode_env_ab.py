"""A/B of a decode knob read per call (an environment variable), graphed and interleaved in one
process: for each shape, one CUDA graph of the attend is captured per value of the variable
(the launcher reads it at capture), then the graphs are replayed in alternating order over
several rounds (L2 flushed before each replay), so that drift of the GPU's clocks falls on every
arm alike. Prints each arm's median over rounds of the per-round median, and its ratio to the
first arm's.

python scripts/decode_env_ab.py --env FOLD_DECODE_RING_BLOCKS --values "0,-" --dense-only \
    --shapes "128,4096,32,8,128;1,32768,32,8,128" [--rounds 7] [--reps 10]
("-" leaves the variable unset; the cache is the decode protocol's synthetic one, as in
decode_kernel_times.py; --spare F gives it F times the length's capacity, so that the split grid,
which follows the capacity, holds (F - 1) / F empty splits; needs a GPU and a CUDA build;
FOLD_ATTENTION_LIBRARY may name the .so)

python scripts/decode_env_ab.py --depths "16,none" --shapes "..."
compares the cache's depth instead (arms: depth values, "none" reads every key): one cache per
shape, built at the first arm's depth, its `depth` set per arm before that arm's capture.
--v8: caches with V in two E4M3 planes.

--capture LAYER: the cache of a real-model capture's layer (benchmarks/captures.py; the first
capture found) instead of the synthetic one; each shape is "B,L" (heads and head dim are the
capture's): the capture's request at length L (its query the token at L - 1) repeated B times,
so that a batch has the real cache's live fractions.
"""

import os
import statistics
import sys

import torch

from fold_attention.decode import decode_step_cuda
from graph_timing import replay_times

sys.path.insert(0, ".")  # the repository root: the protocol's cache builders
from benchmarks.arms.fold import build_cache  # noqa: E402
from benchmarks.decode import (  # noqa: E402
    capture_problem,
    capture_shapes,
    first_capture_or_exit,
    synthetic_problem,
)


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


ENV = arg("--env", "")
VALUES = arg("--values", "").split(",")
DEPTH_ARMS = [None if d == "none" else float(d) for d in arg("--depths", "").split(",") if d]
if DEPTH_ARMS:
    ENV, VALUES = "depth", [str(d) for d in DEPTH_ARMS]
if (not ENV or len(VALUES) < 2) and len(DEPTH_ARMS) < 2:
    sys.exit("usage: --env NAME --values A,B[,...] or --depths A,B[,...] (see the docstring)")
SHAPES = [tuple(int(x) for x in s.split(",")) for s in arg("--shapes", "").split(";") if s]
CAPTURE_LAYER = arg("--capture", "")
CAP = None
if CAPTURE_LAYER:
    CAP = first_capture_or_exit()
    SHAPES = capture_shapes(CAP, SHAPES)


def make_problem(B, L, H, Hkv, D):
    if CAP is None:
        return synthetic_problem(B, L, H, Hkv, D)
    return capture_problem(CAP, CAPTURE_LAYER, L, B)
DEPTHS = [DEPTH_ARMS[0]] if DEPTH_ARMS else [None] if "--dense-only" in sys.argv \
    else [16.0] if "--screened-only" in sys.argv else [None, 16.0]
ROUNDS, REPS = int(arg("--rounds", "7")), int(arg("--reps", "10"))
SPARE = int(arg("--spare", "1"))
V8 = "--v8" in sys.argv  # caches with V in two E4M3 planes
dev = torch.device("cuda")


def set_env(value):
    if DEPTH_ARMS:
        return
    if value == "-":
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = value


print(f"{ENV}: arms {VALUES}; {ROUNDS} rounds x {REPS} replays, interleaved", flush=True)
for B, L, H, Hkv, D in SHAPES:
    for depth in DEPTHS:
        prob = make_problem(B, L, H, Hkv, D)
        cache, q = build_cache(prob, depth, V8, max_len=SPARE * L + 64), prob.q
        out = torch.empty(B, H, D, dtype=torch.bfloat16, device=dev)
        lse = torch.empty(B, H, dtype=torch.float32, device=dev)
        graphs, reads = [], []  # reads: each arm's step statistics (bytes per key, fractions)
        for i, v in enumerate(VALUES):
            set_env(v)
            if DEPTH_ARMS:
                cache.depth = DEPTH_ARMS[i]
            decode_step_cuda(cache, q, None, None, out, lse)  # warm-up (and any lazy setup)
            torch.cuda.synchronize()
            reads.append(cache.stats())
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                decode_step_cuda(cache, q, None, None, out, lse)
            graphs.append(g)
        set_env(VALUES[0])
        t = [[] for _ in VALUES]
        for r in range(ROUNDS):
            order = range(len(VALUES)) if r % 2 == 0 else reversed(range(len(VALUES)))
            for i in order:
                t[i].append(statistics.median(replay_times(graphs[i], REPS)))
        med = [statistics.median(x) for x in t]
        cells = "  ".join(
            f"{v}: {m:7.1f} us ({m / med[0]:.3f}) [{st['bytes_per_key']:.0f} B/key, live "
            f"{st['live_frac']:.3f}, v-refined {st['v_refine_frac']:.3f}]"
            for v, m, st in zip(VALUES, med, reads)
        )
        spare = f" max_len={SPARE * L + 64}" if SPARE > 1 else ""
        v8 = " v8" if V8 else ""
        v8 += f" capture layer {CAPTURE_LAYER}" if CAP is not None else ""
        print(f"B={B} L={L} H={H}/{Hkv} D={D} depth={depth}{v8}{spare}: {cells}", flush=True)
        del graphs, cache, q
        torch.cuda.empty_cache()
