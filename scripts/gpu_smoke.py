"""A small call of every CUDA kernel, for compute-sanitizer (memcheck, racecheck):
the backward preprocess, the training forward and the training backward, and the decode
(cache writer with v8 growth, front, splits, combine, guard fix-up, sliding windows and sinks)."""
import os
import sys

import torch

import fold_attention as fa
from fold_attention import ops

torch.manual_seed(0)
dev = "cuda"
decode_only = "--decode-only" in sys.argv  # (e.g. for racecheck: the decode kernels only)
training_only = "--training-only" in sys.argv  # (the training kernels only)
for dtype in () if decode_only else (torch.bfloat16, torch.float16):
    for d in (64, 96, 128):
        lengths = [5, 0, 70, 1]
        cu = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)), dtype=torch.int32, device=dev)
        t = int(cu[-1])
        k = torch.randn(t, 2, d, device=dev, dtype=dtype)
        v = torch.randn(t, 2, d, device=dev, dtype=dtype)
        o = torch.randn(t, 6, d, device=dev, dtype=dtype)
        do = torch.randn(t, 6, d, device=dev, dtype=dtype)
        ops.bwd_preprocess(k, v, o, do, cu_seqlens=cu)
        # Training forward + backward, packed (GQA) and dense (causal).
        q = torch.randn(t, 6, d, device=dev, dtype=dtype, requires_grad=True)
        kk, vv = (x.clone().requires_grad_(True) for x in (k, v))
        fa.fold_attn_varlen_func(q, kk, vv, cu, causal=False).backward(do)
        qd = torch.randn(2, 70, 4, d, device=dev, dtype=dtype, requires_grad=True)
        kd = torch.randn(2, 70, 2, d, device=dev, dtype=dtype, requires_grad=True)
        vd = torch.randn(2, 70, 2, d, device=dev, dtype=dtype, requires_grad=True)
        fa.fold_attn_func(qd, kd, vd, causal=True).backward(torch.randn_like(qd))
        # Several key and query blocks with ragged ends (v1 backward: pipeline stages, masks,
        # bulk reduce of partial query blocks).
        ql = torch.randn(1, 300, 4, d, device=dev, dtype=dtype, requires_grad=True)
        kl = torch.randn(1, 300, 2, d, device=dev, dtype=dtype, requires_grad=True)
        vl = torch.randn(1, 300, 2, d, device=dev, dtype=dtype, requires_grad=True)
        fa.fold_attn_func(ql, kl, vl, causal=True).backward(torch.randn_like(ql))
        # Sliding windows: blocks skipped on both sides and masked inside (forward v1.2 with
        # the K / V-bounds scan at G 1, and the backward's main kernels).
        fa.fold_attn_func(ql, kl, vl, causal=True, window_size=(100, 0)).backward(torch.randn_like(ql))
        fa.fold_attn_func(ql, kl, vl, causal=False, window_size=(70, 150)).backward(torch.randn_like(ql))
        qw, kw, vw = (x.detach()[:, :, :2].clone().requires_grad_(True) for x in (ql, kl, vl))
        fa.fold_attn_func(qw, kw, vw, causal=True, window_size=(90, 0)).backward(torch.randn_like(qw))
        # Attention sinks (the forward's kSinks instances, without and with a window), and the
        # v0 forward's (k with token stride 0: a layout TMA cannot describe).
        sk = (torch.randn(4, device=dev) * 2).requires_grad_(True)
        fa.fold_attn_func(ql, kl, vl, causal=True, sinks=sk).backward(torch.randn_like(ql))
        fa.fold_attn_func(ql, kl, vl, causal=False, window_size=(70, 150),
                          sinks=sk).backward(torch.randn_like(ql))
        with torch.no_grad():
            k0 = kl.detach()[:, :1].expand(kl.shape)
            fa.fold_attn_func(ql.detach(), k0, vl.detach(), causal=True, sinks=sk.detach())
            fa.fold_attn_func(ql.detach(), k0, vl.detach(), causal=True, window_size=(40, 0),
                              sinks=sk.detach())
    # D 256 (v0's backward main kernel) with a window, and with sinks.
    qw = torch.randn(1, 300, 2, 256, device=dev, dtype=dtype, requires_grad=True)
    kw = torch.randn(1, 300, 1, 256, device=dev, dtype=dtype, requires_grad=True)
    vw = torch.randn(1, 300, 1, 256, device=dev, dtype=dtype, requires_grad=True)
    fa.fold_attn_func(qw, kw, vw, causal=True, window_size=(100, 0)).backward(torch.randn_like(qw))
    sk = torch.randn(2, device=dev, requires_grad=True)
    fa.fold_attn_func(qw, kw, vw, causal=True, sinks=sk).backward(torch.randn_like(qw))
    fa.fold_attn_func(qw, kw, vw, causal=True, window_size=(100, 0),
                      sinks=sk).backward(torch.randn_like(qw))
# Decode: ragged requests (empty, free, several splits and pages), an fp16 needle that
# trips the guard, v8 exponent growth (v8 caches at D 64 / 128 run dense since session 36's
# planner, through the v8 ring: D 64 G 8, and D 128 G 12 for the ring's 128-byte swizzle and two
# row blocks; the D 128 G 4 one keeps v8's screened split by FOLD_DECODE_SCREEN=1), G = 64 at
# D = 256 (large shared memory); screened
# splits (the two-half split2 at G <= 4 with bf16/fp16 V: D 128 two blocks per SM, D 64 three;
# G 8 at D 128 for its wide form) and dense (depth None: the dense ring; at D 64 G <= 8 its
# four-stage form) splits.
for dtype, v8, d, hkv, g, depth in () if training_only else ((torch.bfloat16, False, 128, 2, 4, 12.0),
                                    (torch.float16, True, 64, 1, 8, 12.0),
                                    (torch.bfloat16, True, 128, 2, 4, 12.0),
                                    (torch.float16, True, 128, 1, 12, None),
                                    (torch.bfloat16, True, 256, 1, 64, 12.0),
                                    (torch.bfloat16, False, 128, 2, 4, None),
                                    (torch.float16, False, 64, 1, 12, None),
                                    (torch.float16, False, 64, 2, 4, None),
                                    (torch.float16, False, 64, 1, 12, 16.0),
                                    (torch.float16, False, 64, 2, 3, 16.0),
                                    (torch.bfloat16, False, 128, 1, 8, 16.0)):
    keep = v8 and d == 128 and g == 4  # v8's screened split (the planner would read every key)
    saved = os.environ.get("FOLD_DECODE_SCREEN")
    if keep:
        os.environ["FOLD_DECODE_SCREEN"] = "1"
    cache = fa.FoldKVCache(4, hkv * g, hkv, d, 1200, depth=depth, v8=v8, page_size=64, dtype=dtype, device=dev)
    for b, n in enumerate([0, 700, 1100, 65]):
        cache.add_request()
        if n:
            cache.extend(b, torch.randn(n, hkv, d, device=dev, dtype=dtype),
                         torch.randn(n, hkv, d, device=dev, dtype=dtype))
    cache.release(3)
    q = torch.randn(4, hkv * g, d, device=dev, dtype=dtype)
    for scale in (1.0, 300.0):
        fa.fold_attn_with_kvcache(q, cache, torch.randn(4, hkv, d, device=dev, dtype=dtype),
                                  torch.randn(4, hkv, d, device=dev, dtype=dtype) * scale)
    print("decode", dtype, "v8" if v8 else "", f"D{d} G{g} depth {depth}", cache.stats())
    if keep:
        if saved is None:
            os.environ.pop("FOLD_DECODE_SCREEN")
        else:
            os.environ["FOLD_DECODE_SCREEN"] = saved
# A large batch (more groups than SMs): the front's 128-thread form (G <= 4), dense and screened.
for dtype, d, hkv, g, depth in () if training_only else ((torch.bfloat16, 128, 2, 4, 16.0),
                                                       (torch.float16, 64, 2, 3, None)):
    nb = 72
    cache = fa.FoldKVCache(nb, hkv * g, hkv, d, 700, depth=depth, page_size=64, dtype=dtype, device=dev)
    for b in range(nb):
        cache.add_request()
        n = 60 + 7 * b
        cache.extend(b, torch.randn(n, hkv, d, device=dev, dtype=dtype),
                     torch.randn(n, hkv, d, device=dev, dtype=dtype))
    q = torch.randn(nb, hkv * g, d, device=dev, dtype=dtype)
    # The launcher's pick (U2 at 144 groups on an H200), then HALF and the combine's two elements
    # per thread forced (read per call).
    for forced in (False, True):
        if forced:
            os.environ["FOLD_DECODE_FRONT_HALF"] = "1"
            os.environ["FOLD_DECODE_COMBINE_EPT"] = "2"
        fa.fold_attn_with_kvcache(q, cache, torch.randn(nb, hkv, d, device=dev, dtype=dtype),
                                  torch.randn(nb, hkv, d, device=dev, dtype=dtype))
    os.environ.pop("FOLD_DECODE_FRONT_HALF", None)
    os.environ.pop("FOLD_DECODE_COMBINE_EPT", None)
    print("decode B72", dtype, f"D{d} G{g} depth {depth}", cache.stats())
# The guard's fix-up: a needle that neither the strata nor the heavy list (taken by larger
# decoys orthogonal to the query) sample; Z undershoots and T leaves fp16's 2^14 window.
if not training_only:
    k = torch.randn(1000, 1, 64) * 0.3
    k[100:900:90] = 0.0
    k[100:900:90, 0, 1] = 40.0
    k[437] = 0.0
    k[437, 0, 0] = 21.0
    cache = fa.FoldKVCache(1, 2, 1, 64, 1000, depth=12.0, dtype=torch.float16, device=dev)
    cache.add_request()
    cache.extend(0, k.half().to(dev), torch.randn(1000, 1, 64, device=dev, dtype=torch.float16))
    qn = torch.zeros(1, 2, 64, device=dev, dtype=torch.float16)
    qn[..., 0] = 8.0
    fa.fold_attn_with_kvcache(qn, cache)
    print("decode guard (expect fixup_rows 2)", cache.stats())
    # The same fix-up under a sliding window holding the needle (over keys [F, L)), with sinks.
    fa.fold_attn_with_kvcache(qn, cache, window_size=(699, 0),
                              sinks=torch.tensor([4.0, float("-inf")], device=dev))
    print("decode guard, window 700 + sinks", cache.stats())
# Sliding windows and sinks (decode.cu's WIN / EXT instances: the front's window sample, the dense
# ring (bf16 / fp16 V) or the plain split from the window's chunk, the combines from its split, the sinks): windows across split and
# page edges, inside the first split and of one key, ragged requests with appends, dense and
# screened, v8 on and off, D 64 / 128 / 256.
for dtype, v8, d, hkv, g, depth in () if training_only else ((torch.bfloat16, False, 128, 2, 4, 16.0),
                                                           (torch.float16, False, 64, 1, 8, None),
                                                           (torch.bfloat16, True, 64, 2, 3, 16.0),
                                                           (torch.float16, True, 128, 1, 16, None),
                                                           (torch.bfloat16, False, 256, 1, 2, 16.0),
                                                           (torch.bfloat16, True, 256, 1, 4, None)):
    cache = fa.FoldKVCache(4, hkv * g, hkv, d, 1600, depth=depth, v8=v8, page_size=64, dtype=dtype, device=dev)
    for b, n in enumerate([1300, 0, 513, 100]):
        cache.add_request()
        if n:
            cache.extend(b, torch.randn(n, hkv, d, device=dev, dtype=dtype),
                         torch.randn(n, hkv, d, device=dev, dtype=dtype))
    cache.release(1)
    q = torch.randn(4, hkv * g, d, device=dev, dtype=dtype)
    sinks = torch.randn(hkv * g, device=dev) * 3
    sinks[0] = float("-inf")
    for window, with_sinks in ((1, False), (100, True), (511, True), (512, False), (513, True),
                               (1000, True), (None, True)):
        fa.fold_attn_with_kvcache(q, cache, torch.randn(4, hkv, d, device=dev, dtype=dtype),
                                  torch.randn(4, hkv, d, device=dev, dtype=dtype),
                                  window_size=(-1, -1) if window is None else (window - 1, 0),
                                  sinks=sinks if with_sinks else None)
    print("decode window + sinks", dtype, "v8" if v8 else "", f"D{d} G{g} depth {depth}", cache.stats())
torch.cuda.synchronize()
print("gpu smoke: ok")
