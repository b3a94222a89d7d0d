"""Quick latency of one CUDA decode step (graphed, L2 flushed before each replay) against
torch SDPA (cuDNN if it takes the shapes) on contiguous bf16 KV. Prints bytes/key, TB/s,
the roofline time at 4.6 TB/s of the bytes each step reads, and the dense output's
distance to SDPA's.

python scripts/decode_bench.py            B1 L32K, B32 L8K, B128 L4K; H 64 / Hkv 8 (G 8), D 128
python scripts/decode_bench.py --quick    B1 L32K only
python scripts/decode_bench.py --g4       H 32 / Hkv 8 (the v0 tables' shapes)
python scripts/decode_bench.py --variants cuda,noring,nopdl   A/B of the library's switches
                                          (FOLD_DECODE_RING=0, FOLD_DECODE_PDL=0,
                                          FOLD_DECODE_SCREEN_RING=1 as "screen", set
                                          before each graph capture); each label is also set as
                                          FOLD_DECODE_VARIANT (for A/B builds that read it)
python scripts/decode_bench.py --profile --shape 1   eager steps of one shape (for ncu / nsys)
(needs a GPU and a CUDA build of the library; FOLD_ATTENTION_LIBRARY may name the .so)
"""

import os
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


CEILING = 4.6e12  # H200 streaming-read ceiling, bytes/s (notes/decode.md section 10)
profile = "--profile" in sys.argv  # one shape, eager steps only (for nsys)
H_ = 32 if "--g4" in sys.argv else 64
shapes = ((1, 32768, H_, 8, 128), (32, 8192, H_, 8, 128), (128, 4096, H_, 8, 128))
variants = [os.environ.get("FOLD_DECODE_VARIANT", "cuda")]
if "--variants" in sys.argv:
    variants = sys.argv[sys.argv.index("--variants") + 1].split(",")


def set_variant(name):
    os.environ["FOLD_DECODE_VARIANT"] = name  # read per call by the library
    # The library's switches, for A/B runs: "noring" sets FOLD_DECODE_RING=0 (the plain dense
    # split), "nopdl" FOLD_DECODE_PDL=0, "screen" FOLD_DECODE_SCREEN_RING=1 (the opt-in screened
    # ring); "noring+nopdl" both; any other label the defaults.
    flags = name.split("+")
    for flag, env, value in (("noring", "FOLD_DECODE_RING", "0"), ("nopdl", "FOLD_DECODE_PDL", "0"),
                             ("screen", "FOLD_DECODE_SCREEN_RING", "1")):
        if flag in flags:
            os.environ[env] = value
        else:
            os.environ.pop(env, None)


if "--shape" in sys.argv:  # one of the shapes by index (0, 1, 2), e.g. to profile B32 L8K
    shapes = shapes[int(sys.argv[sys.argv.index("--shape") + 1]) :][:1]
elif profile or "--quick" in sys.argv:
    shapes = shapes[:1]
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
            for b in range(B):
                cache.add_request()
                cache.extend(b, k[b], v[b])
            out = torch.empty(B, H, D, dtype=torch.bfloat16, device=dev)
            lse = torch.empty(B, H, dtype=torch.float32, device=dev)
            for var in variants:
                set_variant(var)
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
    ref_out = sdpa()[:, :, 0, :].float()
    print(f"B={B} L={L} H={H}/{Hkv} D={D} ({ref_bytes / 2**30:.2f} GiB bf16 KV): SDPA[{backend}] "
          f"{t_ref * 1e6:.1f} us, {2 * D * 2} B/key, {ref_bytes / t_ref / 1e12:.2f} TB/s "
          f"(roofline {ref_bytes / CEILING * 1e6:.1f} us)", flush=True)
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
        first = None
        for var in variants:
            set_variant(var)  # before the capture: the graph keeps the variant it captured
            step = graphed(lambda: decode_step_cuda(cache, q, None, None, out, lse))
            t = timed(step)
            st = cache.stats()
            bytes_total = st["bytes_per_key"] * B * Hkv * L
            err = (out.float() - ref_out).norm().item() / ref_out.norm().item()
            same = ""
            if first is None:
                first = out.clone()
            else:
                same = f"; bits == {variants[0]}: {torch.equal(out.view(torch.int16), first.view(torch.int16))}"
            print(f"  fold[{var}] depth={depth}: {t * 1e6:.1f} us (SDPA/fold {t_ref / t:.2f}x), "
                  f"{st['bytes_per_key']:.0f} B/key, {bytes_total / t / 1e12:.2f} TB/s "
                  f"(roofline {bytes_total / CEILING * 1e6:.1f} us), live {st['live_frac']:.3f} "
                  f"refine {st['refine_frac']:.3f} fixup {st['fixup_rows']}; rel. diff to SDPA {err:.2e}; "
                  f"cache fill {fill:.2f} s{same}", flush=True)
            del step
        del cache
        torch.cuda.empty_cache()
