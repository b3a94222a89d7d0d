"""The cache's page size measured: per shape and depth, one cache per page size holding the same
keys and values, each attend captured in a CUDA graph and the graphs replayed interleaved (L2
flushed before each replay; the order reversed every other round), with each page size's error
against the fp32 reference and its read statistics. Prints, per case, each page size's median
time, its ratio to the first page size's, the relative Frobenius error and, at a finite depth,
the live fraction and bytes per key.

python scripts/decode_page_sizes.py [--pages 64,128,256,512] [--depths none,16] \
    [--shapes "B,L,H,Hkv,D;..."] [--captures L,L] [--rounds 5] [--reps 10]

Shapes default to the decode protocol's synthetic ones; --captures times and checks the real
model's captures (every stored layer, at the given contexts) where a capture is stored (python
-m benchmarks.make_capture). Needs a GPU and a CUDA build (FOLD_ATTENTION_LIBRARY may name it).
"""

import statistics
import sys

import torch

from fold_attention.decode import decode_step_cuda
from graph_timing import replay_times

sys.path.insert(0, ".")  # the repository root: the protocol's problems and metrics
from benchmarks import captures  # noqa: E402
from benchmarks.arms.fold import build_cache  # noqa: E402
from benchmarks.decode import capture_problem, synthetic_problem  # noqa: E402
from benchmarks.metrics import rel_fro_error  # noqa: E402
from benchmarks.reference import decode_reference  # noqa: E402


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


PAGES = [int(x) for x in arg("--pages", "64,128,256,512").split(",")]
DEPTHS = [None if d == "none" else float(d) for d in arg("--depths", "none,16").split(",")]
SHAPES = [tuple(int(x) for x in s.split(",")) for s in arg(
    "--shapes", "1,32768,32,8,128;8,16384,32,8,128;32,8192,32,8,128;128,4096,32,8,128;"
    "16,16384,32,4,128;64,4096,16,4,64").split(";") if s]
CAPTURE_LS = [int(x) for x in arg("--captures", "").split(",") if x]
ROUNDS, REPS = int(arg("--rounds", "5")), int(arg("--reps", "10"))
dev = torch.device("cuda")


def run(name, p, depth, timed=True):
    B, H, D = p.q.shape
    ref = decode_reference(p.q, p.k, p.v)
    out = torch.empty(B, H, D, dtype=p.q.dtype, device=dev)
    lse = torch.empty(B, H, dtype=torch.float32, device=dev)
    cells, graphs, caches = [], [], []
    for page in PAGES:
        c = build_cache(p, depth, False, page_size=page)
        decode_step_cuda(c, p.q, None, None, out, lse)
        torch.cuda.synchronize()
        err = rel_fro_error(out, ref)
        s = c.stats()
        cells.append([page, err, s["live_frac"], s["bytes_per_key"], out.clone()])
        if timed:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                decode_step_cuda(c, p.q, None, None, out, lse)
            graphs.append(g)
        caches.append(c)
    same = all(torch.equal(cells[0][4], x[4]) for x in cells[1:])
    med = [float("nan")] * len(PAGES)
    if timed:
        t = [[] for _ in PAGES]
        for r in range(ROUNDS):
            order = range(len(PAGES)) if r % 2 == 0 else reversed(range(len(PAGES)))
            for i in order:
                t[i].append(statistics.median(replay_times(graphs[i], REPS)))
        med = [statistics.median(x) for x in t]
    parts = []
    for (page, err, live, bpk, _), m in zip(cells, med):
        extra = f" live {live:.3f} {bpk:.0f} B/key" if depth is not None else ""
        tm = f"{m:7.1f} us ({m / med[0]:.3f})" if timed else "untimed"
        parts.append(f"p{page}: {tm} err {err:.5f}{extra}")
    print(f"{name} depth={depth}: " + " | ".join(parts) + f" | outputs {'same' if same else 'differ'}",
          flush=True)
    del graphs, caches
    torch.cuda.empty_cache()


print(f"pages {PAGES}; {ROUNDS} rounds x {REPS} replays, interleaved; err = rel. Frobenius vs fp32",
      flush=True)
for B, L, H, Hkv, D in SHAPES:
    prob = synthetic_problem(B, L, H, Hkv, D)
    for depth in DEPTHS:
        run(f"B={B} L={L} H={H}/{Hkv} D={D}", prob, depth)
    del prob
for cap in captures.load_all() if CAPTURE_LS else []:
    for L in CAPTURE_LS:
        if L > cap.n_tokens or (L - 1) not in cap.query_positions:
            continue
        for i, layer in enumerate(cap.layer_ids):
            prob = capture_problem(cap, layer, L)
            for depth in DEPTHS:
                # Every layer's error; the time of the first layer only (the shape is the same).
                run(f"capture {cap.capture_id[:8]} layer {layer} L={L}", prob, depth, timed=i == 0)
