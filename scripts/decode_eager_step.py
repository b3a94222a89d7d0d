"""The eager decode step's time per step (append + attend through fold_attn_with_kvcache, as a
generation loop calls it), at a few shapes: N steps back to back, one device sync at the end,
the median over rounds, in microseconds per step. The step is host-bound (its input checks
read the device once per step), so this measures the package's host path as much as the
kernels; run it under two package versions (PYTHONPATH) in alternation to compare them.

python scripts/decode_eager_step.py [--steps 100] [--rounds 5] [--profile]
    [--shapes "B,L,H,Hkv,D;..."]   (needs a GPU and a CUDA build)
--profile: also prints cProfile's top functions (by own time) over one round of the first shape.
--fresh: also times the first steps of freshly prefilled caches one by one (a device sync after
    each): what a loop that builds a new cache and times it without a warm-up (the generate
    suite) pays once per cache.
"""

import cProfile
import pstats
import statistics
import sys
import time

import torch

import fold_attention as fa


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


SHAPES = [tuple(int(x) for x in s.split(",")) for s in arg(
    "--shapes", "1,8192,9,3,64;1,4096,64,8,128;32,8192,32,8,128;128,4096,32,8,128").split(";") if s]
STEPS, ROUNDS = int(arg("--steps", "100")), int(arg("--rounds", "5"))
dev = torch.device("cuda")
torch.manual_seed(0)


def make(B, L, H, Hkv, D, depth):
    extra = STEPS * (ROUNDS + 2) + 64
    cache = fa.FoldKVCache(B, H, Hkv, D, L + extra, depth=depth, device=dev)
    k = torch.randn(B * L, Hkv, D, device=dev, dtype=torch.bfloat16)
    v = torch.randn(B * L, Hkv, D, device=dev, dtype=torch.bfloat16)
    qp = torch.randn(B * L, H, D, device=dev, dtype=torch.bfloat16)
    cache.prefill(qp, k, v, torch.arange(0, B + 1, dtype=torch.int32, device=dev) * L)
    return cache


def steps(cache, q, ks, vs, n):
    for _ in range(n):
        fa.fold_attn_with_kvcache(q, cache, ks, vs)


def fresh_steps(B, L, H, Hkv, D, depth, first=6):
    """Per-step host time of a new cache's first steps, then the mean of the next STEPS."""
    for r in range(3):
        cache = make(B, L, H, Hkv, D, depth)
        q = torch.randn(B, 1, H, D, device=dev, dtype=torch.bfloat16)
        ks = torch.randn(B, 1, Hkv, D, device=dev, dtype=torch.bfloat16)
        vs = torch.randn(B, 1, Hkv, D, device=dev, dtype=torch.bfloat16)
        torch.cuda.synchronize()
        t = []
        for _ in range(first):
            t0 = time.perf_counter()
            steps(cache, q, ks, vs, 1)
            torch.cuda.synchronize()
            t.append((time.perf_counter() - t0) * 1e6)
        t0 = time.perf_counter()
        steps(cache, q, ks, vs, STEPS)
        torch.cuda.synchronize()
        rest = (time.perf_counter() - t0) / STEPS * 1e6
        print(f"fresh cache {r} B={B} L={L} H={H}/{Hkv} D={D} depth={depth}: first steps "
              f"{' '.join(f'{x:.0f}' for x in t)} us (each synced), then {rest:.1f} us/step", flush=True)
        del cache


if "--fresh" in sys.argv:
    for B, L, H, Hkv, D in SHAPES:
        for depth in (None, 16):
            fresh_steps(B, L, H, Hkv, D, depth)

for i, (B, L, H, Hkv, D) in enumerate(SHAPES):
    for depth in (None, 16):
        cache = make(B, L, H, Hkv, D, depth)
        q = torch.randn(B, 1, H, D, device=dev, dtype=torch.bfloat16)
        ks = torch.randn(B, 1, Hkv, D, device=dev, dtype=torch.bfloat16)
        vs = torch.randn(B, 1, Hkv, D, device=dev, dtype=torch.bfloat16)
        steps(cache, q, ks, vs, 10)
        torch.cuda.synchronize()
        t = []
        for _ in range(ROUNDS):
            t0 = time.perf_counter()
            steps(cache, q, ks, vs, STEPS)
            torch.cuda.synchronize()
            t.append((time.perf_counter() - t0) / STEPS * 1e6)
        print(f"B={B} L={L} H={H}/{Hkv} D={D} depth={depth}: {statistics.median(t):7.1f} us/step "
              f"(rounds {min(t):.1f}-{max(t):.1f})", flush=True)
        if "--profile" in sys.argv and i == 0 and depth is None:
            prof = cProfile.Profile()
            prof.enable()
            steps(cache, q, ks, vs, STEPS)
            torch.cuda.synchronize()
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(18)
        del cache
        torch.cuda.empty_cache()
