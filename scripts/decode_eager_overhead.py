"""In-process A/B of the eager decode step's host costs (B1, H 64/8, D 128, L 4K): the step as
the library runs it now, the previous eager path (reconstructed here: a finiteness test per
tensor, an index gather, the op through the torch.library dispatcher), and the components
(the op with and without the dispatcher, four ways of testing finiteness, the lengths read).
Each case: 5 steps then a device sync, median over 30 rounds in alternating order. Machines
differ by up to ~1.5x in host speed, so only figures from one process compare.

python scripts/decode_eager_overhead.py   (needs a GPU and a CUDA build of the library)
"""
import os
import statistics
import time

import torch

import fold_attention as fa
from fold_attention.decode import V_REFINE_EXTRA
from fold_attention._decode_op import decode_step_impl, decode_step_op
dev = torch.device("cuda")
H, Hkv, D, L = 64, 8, 128, 4096
torch.manual_seed(0)
k = torch.randn(L, Hkv, D, device=dev, dtype=torch.bfloat16)
v = torch.randn(L, Hkv, D, device=dev, dtype=torch.bfloat16)
cache = fa.FoldKVCache(1, H, Hkv, D, L + 100000, depth=None, device=dev)
cache.add_request(length=L + 100000)
cache.extend(0, k, v)
q = torch.randn(1, H, D, device=dev, dtype=torch.bfloat16)
ks = torch.randn(1, Hkv, D, device=dev, dtype=torch.bfloat16)
vs = torch.randn(1, Hkv, D, device=dev, dtype=torch.bfloat16)
out = torch.empty(1, H, D, device=dev, dtype=torch.bfloat16)
lse = torch.empty(1, H, device=dev, dtype=torch.float32)

def args_of(qq, kk, vv):
    c = cache
    return (qq, kk, vv, c.k_a, c.k_b, c.k_scale, c.v, c.v_a, c.v_b, c.v_exp, c.v_page_sum, c.heavy_keys,
            c.page_table, c.lengths, c._workspace, c._stats_dev, c.max_len, c._v_exp_fixed is not None,
            c.softmax_scale, c.depth, c.refine_band, c.refine_band + V_REFINE_EXTRA)

def checks_per_tensor():
    lengths = cache.lengths.tolist()
    active = [b for b, n in enumerate(lengths) if n >= 0]
    idx = torch.tensor(active, dtype=torch.long, device=dev)
    checks = [q, ks[idx], vs[idx]]
    return bool(torch.stack([torch.isfinite(x).all() for x in checks]).all())

def checks_cat():
    lengths = cache.lengths.tolist()
    active = [b for b, n in enumerate(lengths) if n >= 0]
    xs = [q, ks, vs] if len(active) == cache.batch else [q, ks[active], vs[active]]
    return bool(torch.isfinite(torch.cat([x.reshape(-1) for x in xs])).all())

def checks_foreach():
    lengths = cache.lengths.tolist()
    active = [b for b, n in enumerate(lengths) if n >= 0]
    xs = [q, ks, vs] if len(active) == cache.batch else [q, ks[active], vs[active]]
    n = torch._foreach_norm(xs, float("inf"))
    return bool(torch.isfinite(torch.stack(n)).all())

def checks_amax():
    lengths = cache.lengths.tolist()
    active = [b for b, n in enumerate(lengths) if n >= 0]
    xs = [q, ks, vs] if len(active) == cache.batch else [q, ks[active], vs[active]]
    m = torch.stack([x.abs().amax() for x in xs]).float()
    return bool((m < float("inf")).all())

def lengths_only():
    return cache.lengths.tolist()

def full():
    fa.fold_attn_with_kvcache(q, cache, ks, vs)

def full_torch_checks():
    # the step with the torch checks (the lengths read, then a finiteness test per input)
    # instead of the one-kernel precheck, where the library has it (FOLD_DECODE_PRECHECK=0)
    old = os.environ.get("FOLD_DECODE_PRECHECK")
    os.environ["FOLD_DECODE_PRECHECK"] = "0"
    try:
        fa.fold_attn_with_kvcache(q, cache, ks, vs)
    finally:
        os.environ.pop("FOLD_DECODE_PRECHECK", None)
        if old is not None:
            os.environ["FOLD_DECODE_PRECHECK"] = old

def full_old():
    # the previous eager path, reconstructed: a finiteness test per tensor, gather always,
    # the op through the torch.library dispatcher
    lengths = cache.lengths.tolist()
    active = [b for b, n in enumerate(lengths) if n >= 0]
    for b in active:
        assert lengths[b] < cache.max_len
    idx = torch.tensor(active, dtype=torch.long, device=dev)
    checks = [q, ks[idx], vs[idx]]
    assert bool(torch.stack([torch.isfinite(x).all() for x in checks]).all())
    for b in active:
        cache._reserve(b, lengths[b] + 1)
    decode_step_op(*args_of(q, ks, vs))

def op_dispatch():
    decode_step_op(*args_of(q, ks, vs))

def op_raw():
    decode_step_impl(*args_of(q, ks, vs))

def reserve_only():
    n = cache.lengths.tolist()[0]
    cache._reserve(0, n + 1)

def _c_call_prebuilt():
    """The C entry point with its descriptors built once (decode_step_into's): the C++ host
    work (checks, plan, tensor maps, launches) without the Python side's per-call building."""
    import ctypes
    from fold_attention._decode_op import _rows, cache_desc
    from fold_attention._decode_lib import FoldDecodeParams, library
    c = cache
    desc = cache_desc(q.dtype, 1, D, *args_of(q, None, None)[3:14], c.max_len, c._v_exp_fixed is not None)
    params = FoldDecodeParams(n_heads=H, softmax_scale=c.softmax_scale, dense=1, depth=0.0,
                              refine_band=c.refine_band, v_refine_band=c.refine_band + V_REFINE_EXTRA)
    none = _rows(None, 0, 0)
    args = (ctypes.byref(desc), ctypes.byref(params), _rows(q, H, D), none, none, _rows(out, H, D),
            ctypes.cast(lse.data_ptr(), ctypes.POINTER(ctypes.c_float)),
            ctypes.cast(c._stats_dev.data_ptr(), ctypes.POINTER(ctypes.c_int64)),
            ctypes.c_void_p(c._workspace.data_ptr()), ctypes.c_size_t(c._workspace.numel()),
            ctypes.c_void_p(torch.cuda.current_stream(dev).cuda_stream))
    fn = library().fold_decode_cuda
    from fold_attention import _lib

    def call():
        status = fn(*args)
        if status != 0:
            _lib.check(status, "fold_decode_cuda")

    return call

c_only = _c_call_prebuilt()

cases = [("C call only (attend, prebuilt descriptors)", c_only), ("full step (new)", full),
         ("full step (torch checks)", full_torch_checks), ("full step (old path)", full_old), ("op raw impl", op_raw),
         ("checks old (per tensor)", checks_per_tensor), ("checks cat", checks_cat), ("checks foreach_norm", checks_foreach),
         ("op via dispatcher", op_dispatch), ("checks amax", checks_amax), ("lengths.tolist only", lengths_only), ("reserve (+tolist)", reserve_only)]
for name, fn in cases:
    try:
        fn(); torch.cuda.synchronize()
    except Exception as e:
        print(name, "FAILED", type(e).__name__, e); cases = [c for c in cases if c[0] != name]
res = {n: [] for n, _ in cases}
for rnd in range(30):
    for name, fn in (cases if rnd % 2 == 0 else cases[::-1]):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        res[name].append((time.perf_counter() - t0) / 5 * 1e6)
for name, _ in cases:
    print(f"{name:44s} {statistics.median(res[name]):8.1f} us")
print("lengths now", cache.lengths.tolist())
