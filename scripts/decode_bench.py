"""Quick latency of one CUDA decode step (graphed, L2 flushed before each replay) against
torch SDPA (cuDNN if it takes the shapes) on contiguous bf16 KV. Prints bytes/key and TB/s.

python scripts/decode_bench.py  (needs a GPU and a CUDA build of the library)
"""

import sys
import time

import torch
import torch.nn.functional as F

import fold_attention as fa
from fold_attention.decode import decode_step_cuda

dev = torch.device("cuda")
flush = torch.empty(512 * 2**20, dtype=torch.uint8, device=dev)


def timed(fn, reps=20):
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        flush.zero_()
        start[i].record()
        fn()
        end[i].record()
    torch.cuda.synchronize()
    t = sorted(s.elapsed_time(e) for s, e in zip(start, end))
    return t[len(t) // 2] * 1e-3  # median, seconds


def graphed(fn):
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


profile = "--profile" in sys.argv  # one shape, eager steps only (for nsys)
shapes = ((1, 32768, 32, 8, 128),) if profile else ((1, 32768, 32, 8, 128), (32, 8192, 32, 8, 128))
for B, L, H, Hkv, D in shapes:
    torch.manual_seed(0)
    k = torch.randn(B, L, Hkv, D, device=dev, dtype=torch.bfloat16)
    v = torch.randn(B, L, Hkv, D, device=dev, dtype=torch.bfloat16) + 1.0
    q = torch.randn(B, H, D, device=dev, dtype=torch.bfloat16)
    # SDPA on contiguous KV (B, Hkv, L, D); GQA by enable_gqa.
    qs = q[:, :, None, :]
    ks, vs = k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()
    backend = "cudnn"
    try:
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
            F.scaled_dot_product_attention(qs, ks, vs, enable_gqa=True)
        ctx = torch.nn.attention.SDPBackend.CUDNN_ATTENTION
    except Exception:  # noqa: BLE001
        backend = "flash"
        ctx = torch.nn.attention.SDPBackend.FLASH_ATTENTION
        try:
            with torch.nn.attention.sdpa_kernel(ctx):
                F.scaled_dot_product_attention(qs, ks, vs, enable_gqa=True)
        except Exception:  # noqa: BLE001
            backend = "math-default"
            ctx = None

    def sdpa():
        if ctx is None:
            return F.scaled_dot_product_attention(qs, ks, vs, enable_gqa=True)
        with torch.nn.attention.sdpa_kernel(ctx):
            return F.scaled_dot_product_attention(qs, ks, vs, enable_gqa=True)

    if profile:
        for depth in (None, 12.0):
            cache = fa.FoldKVCache(B, H, Hkv, D, L, depth=depth, device=dev)
            cache.add_request()
            cache.extend(0, k[0], v[0])
            out = torch.empty(B, H, D, dtype=torch.bfloat16, device=dev)
            lse = torch.empty(B, H, dtype=torch.float32, device=dev)
            for _ in range(5):
                decode_step_cuda(cache, q, None, None, out, lse)
            torch.cuda.synchronize()
        break
    try:
        t_ref = timed(graphed(sdpa))
    except Exception as exc:  # noqa: BLE001
        print("sdpa graph failed:", exc)
        t_ref = timed(sdpa)
    ref_bytes = B * Hkv * L * 2 * D * 2
    print(f"B={B} L={L} H={H}/{Hkv} D={D}: SDPA[{backend}] {t_ref * 1e6:.1f} us, "
          f"{2 * D * 2} B/key, {ref_bytes / t_ref / 1e12:.2f} TB/s")
    for depth in (None, 16.0, 12.0):
        t0 = time.time()
        cache = fa.FoldKVCache(B, H, Hkv, D, L, depth=depth, device=dev)
        for b in range(B):
            cache.add_request()
            cache.extend(b, k[b], v[b])
        torch.cuda.synchronize()
        fill = time.time() - t0
        out = torch.empty(B, H, D, dtype=torch.bfloat16, device=dev)
        lse = torch.empty(B, H, dtype=torch.float32, device=dev)
        step = graphed(lambda: decode_step_cuda(cache, q, None, None, out, lse))
        t = timed(step)
        st = cache.stats()
        bytes_total = st["bytes_per_key"] * B * Hkv * L
        print(f"  fold depth={depth}: {t * 1e6:.1f} us ({t / t_ref:.2f}x SDPA), "
              f"{st['bytes_per_key']:.0f} B/key, {bytes_total / t / 1e12:.2f} TB/s, live {st['live_frac']:.3f} "
              f"refine {st['refine_frac']:.3f} fixup {st['fixup_rows']}; cache fill {fill:.2f} s")
        del cache
        torch.cuda.empty_cache()
