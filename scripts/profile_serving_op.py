"""Where a chunk after a request's history spends its host time (FoldKVCache.prefill_request on
a request that holds L tokens; not the benchmark protocol). Per case, after warm-up:
  - wall µs per call (perf_counter around the call and a device sync);
  - the torch.profiler's table of the call's own ops and runtime calls (self CPU time, counts:
    cudaStreamSynchronize / cudaMemcpyAsync name the host waits), sorted by self CPU time, and on
    a GPU the same table by device time (the kernels);
  - cProfile's package functions by cumulative time.

    python3 scripts/profile_serving_op.py [--device cuda] [--cases "L,n;L,n"] [--rows 25]
                                          [--cpu-only]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import torch

import fold_attention as fa


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--cases", default="4096,16;4096,128")
    ap.add_argument("--heads", default="32,8,128", help="H,Hkv,D")
    ap.add_argument("--rows", type=int, default=25)
    ap.add_argument("--cpu-only", action="store_true",
                    help="the profiler without CUPTI (its first activity buffer costs ~3 ms)")
    args = ap.parse_args(argv)
    dev = torch.device(args.device)
    H, Hkv, D = (int(x) for x in args.heads.split(","))
    cases = [tuple(int(x) for x in c.split(",")) for c in args.cases.split(";") if c]
    g = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=g).to(torch.bfloat16).to(dev)

    for L, n in cases:
        k, v = rand(L, Hkv, D), rand(L, Hkv, D)
        cq, ck, cv = rand(n, H, D), rand(n, Hkv, D), rand(n, Hkv, D)
        cache = fa.FoldKVCache(1, H, Hkv, D, L + n, depth=16, page_size=256, device=dev)

        def refill():
            if cache.active:
                cache.release(0)
            cache.add_request()
            cache.extend(0, k, v)
            sync(dev)

        def call():
            cache.prefill_request(0, cq, ck, cv)

        walls = []
        for i in range(8):
            refill()
            t = time.perf_counter()
            call()
            sync(dev)
            if i >= 3:
                walls.append((time.perf_counter() - t) * 1e6)
        print(f"== L {L} n {n} H {H}/{Hkv} D {D} on {dev.type}: wall "
              f"{sorted(walls)[len(walls) // 2]:.1f} µs per call (median of {len(walls)})")
        refill()
        acts = [torch.profiler.ProfilerActivity.CPU]
        kernels = dev.type == "cuda" and not args.cpu_only
        if kernels:
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=acts) as prof:
            call()
            sync(dev)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))
        if kernels:  # the kernels, by device time
            print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=12))
        refill()
        pr = cProfile.Profile()
        pr.enable()
        call()
        sync(dev)
        pr.disable()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats("fold_attention", args.rows)
        print("\n".join(line for line in s.getvalue().splitlines() if line.strip())[-6000:])


if __name__ == "__main__":
    main()
