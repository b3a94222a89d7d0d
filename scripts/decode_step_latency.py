"""Latency of one whole decode step at batch 1 (append one token + attend), eager and graphed.

Eager: `fold_attn_with_kvcache(q, cache, k, v)` as a user calls it (host checks, page
reservation, the kernels), timed by the host clock around each step with a device sync,
median of the steps. Graphed: `decode_step_cuda` (append + attend, no host work) captured once
in a CUDA graph and replayed, each replay appending the next token (pages reserved up front),
timed with CUDA events, median per replay. Also the graphed attend alone (no append) and torch
SDPA (cuDNN) on contiguous bf16 KV of the same length for reference. No L2 flush between steps
(a real decode loop; at L 32K the KV exceeds L2 anyway).

python scripts/decode_step_latency.py          H 64 / Hkv 8, D 128, L 4K and 32K
(needs a GPU and a CUDA build of the library; FOLD_ATTENTION_LIBRARY may name the .so)
"""

import statistics
import time

import torch
import torch.nn.functional as F

import fold_attention as fa
from fold_attention.decode import decode_step_cuda

dev = torch.device("cuda")
STEPS = 40


def graph_of(fn):
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    torch.cuda.synchronize()
    return g


def replay_us(g, reps):
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        start[i].record()
        g.replay()
        end[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(start, end)) * 1e3


def make_cache(L, H, Hkv, D, depth, k, v, extra):
    cache = fa.FoldKVCache(1, H, Hkv, D, L + extra, depth=depth, device=dev)
    cache.add_request(length=L + extra)  # pages for every token the steps append
    cache.extend(0, k, v)
    torch.cuda.synchronize()
    return cache


def main():
    H, Hkv, D = 64, 8, 128
    for L in (4096, 32768):
        torch.manual_seed(0)
        k = torch.randn(L, Hkv, D, device=dev, dtype=torch.bfloat16)
        v = torch.randn(L, Hkv, D, device=dev, dtype=torch.bfloat16) + 1.0
        qs = torch.randn(STEPS, 1, H, D, device=dev, dtype=torch.bfloat16)
        ks = torch.randn(STEPS, 1, Hkv, D, device=dev, dtype=torch.bfloat16)
        vs = torch.randn(STEPS, 1, Hkv, D, device=dev, dtype=torch.bfloat16)
        kc = k.transpose(0, 1)[None].contiguous()
        vc = v.transpose(0, 1)[None].contiguous()
        q4 = qs[0][:, :, None, :]

        def sdpa():
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q4, kc, vc, enable_gqa=True)

        sdpa()
        t_sdpa = replay_us(graph_of(sdpa), 20)
        print(f"B1 L={L} H={H}/{Hkv} D={D}: SDPA[cudnn] attend {t_sdpa:.1f} us (graphed)", flush=True)
        for depth in (None, 16.0, 12.0):
            # Eager: the user-facing call, one token appended per step.
            cache = make_cache(L, H, Hkv, D, depth, k, v, 2 * STEPS + 2)
            fa.fold_attn_with_kvcache(qs[0], cache, ks[0], vs[0])  # warm-up (also appends)
            torch.cuda.synchronize()
            times = []
            for i in range(STEPS):
                t0 = time.perf_counter()
                fa.fold_attn_with_kvcache(qs[i], cache, ks[i], vs[i])
                torch.cuda.synchronize()
                times.append((time.perf_counter() - t0) * 1e6)
            eager = statistics.median(times)
            # Graphed: append + attend captured once; each replay appends the next token.
            sq, sk, sv = qs[0].clone(), ks[0].clone(), vs[0].clone()
            out = torch.empty(1, H, D, dtype=torch.bfloat16, device=dev)
            lse = torch.empty(1, H, dtype=torch.float32, device=dev)
            cache._cuda_buffers()
            g = graph_of(lambda: decode_step_cuda(cache, sq, sk, sv, out, lse))
            t_step = replay_us(g, STEPS - 2)
            g_att = graph_of(lambda: decode_step_cuda(cache, sq, None, None, out, lse))
            t_att = replay_us(g_att, 20)
            n = cache.lengths.tolist()[0]
            print(f"  depth={depth}: step eager {eager:.1f} us, step graphed {t_step:.1f} us, "
                  f"attend graphed {t_att:.1f} us (length after the steps {n})", flush=True)


if __name__ == "__main__":
    main()
