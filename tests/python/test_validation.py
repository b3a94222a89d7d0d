"""Every argument is validated in Python before any C call; errors name the argument.

None of these tests needs the shared library: validation happens before it is loaded.
"""

import math
import re

import numpy as np
import pytest
import torch

import fold_attention as fa
from fold_attention import ops

B, S, H, HKV, D = 2, 5, 4, 2, 16
T = 9


def dense(dtype=torch.float32, **shapes):
    b, s, h, hkv, d = (shapes.get(n, x) for n, x in (("B", B), ("S", S), ("H", H), ("Hkv", HKV), ("D", D)))
    return (
        torch.randn(b, s, h, d, dtype=dtype),
        torch.randn(b, s, hkv, d, dtype=dtype),
        torch.randn(b, s, hkv, d, dtype=dtype),
    )


def packed(dtype=torch.float32, total=T):
    return (
        torch.randn(total, H, D, dtype=dtype),
        torch.randn(total, HKV, D, dtype=dtype),
        torch.randn(total, HKV, D, dtype=dtype),
    )


CU = torch.tensor([0, 4, 4, 9], dtype=torch.int32)


def call_dense(q, k, v, **kw):
    return lambda: fa.fold_attn_func(q, k, v, **kw)


def call_varlen(q, k, v, cu, **kw):
    return lambda: fa.fold_attn_varlen_func(q, k, v, cu, **kw)


def _with(t, i, x):
    t = list(t)
    t[i] = x
    return tuple(t)


q0, k0, v0 = dense()
p0 = packed()

CASES = [
    # non-tensor inputs
    ("q-not-tensor", call_dense(q0.numpy(), k0, v0), TypeError, "q"),
    ("k-not-tensor", call_dense(q0, [1.0], v0), TypeError, "k"),
    ("v-not-tensor", call_dense(q0, k0, None), TypeError, "v"),
    ("varlen-q-not-tensor", call_varlen(3, p0[1], p0[2], CU), TypeError, "q"),
    ("cu-not-tensor", call_varlen(*p0, [0, 4, 4, 9]), TypeError, "cu_seqlens"),
    ("cu-none", call_varlen(*p0, None), TypeError, "cu_seqlens"),
    # dtypes
    ("q-float64", call_dense(*dense(torch.float64)), TypeError, "q"),
    ("q-int32", call_dense(q0.to(torch.int32), k0, v0), TypeError, "q"),
    ("k-mixed", call_dense(q0, k0.half(), v0), TypeError, "k"),
    ("v-mixed", call_dense(q0.bfloat16(), k0.bfloat16(), v0.half()), TypeError, "v"),
    ("varlen-k-mixed", call_varlen(p0[0], p0[1].bfloat16(), p0[2], CU), TypeError, "k"),
    # ndim
    ("q-3d", call_dense(q0[0], k0, v0), ValueError, "q"),
    ("k-5d", call_dense(q0, k0[None], v0), ValueError, "k"),
    ("varlen-q-4d", call_varlen(p0[0][None], p0[1], p0[2], CU), ValueError, "q"),
    ("varlen-v-2d", call_varlen(p0[0], p0[1], p0[2][:, 0], CU), ValueError, "v"),
    # shapes
    ("k-batch", call_dense(q0, k0[:1], v0), ValueError, "k"),
    ("v-seqlen", call_dense(q0, k0, v0[:, :3]), ValueError, "v"),
    ("k-head-dim", call_dense(q0, k0[..., :8], v0), ValueError, "k"),
    ("v-head-dim", call_dense(q0, k0, v0[..., :8]), ValueError, "v"),
    ("v-heads", call_dense(q0, k0, v0[:, :, :1]), ValueError, "v"),
    ("h-not-multiple", call_dense(*dense(H=4, Hkv=3)), ValueError, "q"),
    ("d-zero", call_dense(*dense(D=0)), ValueError, "q"),
    ("d-257", call_dense(*dense(D=257)), ValueError, "q"),
    ("q-zero-heads", call_dense(*dense(H=0, Hkv=1)), ValueError, "q"),
    ("k-zero-heads", call_dense(*dense(H=4, Hkv=0)), ValueError, "k"),
    ("batch-zero", call_dense(*dense(B=0)), ValueError, "q"),
    ("varlen-k-tokens", call_varlen(p0[0], p0[1][:8], p0[2], CU), ValueError, "k"),
    # cu_seqlens
    ("cu-int64", call_varlen(*p0, CU.long()), TypeError, "cu_seqlens"),
    ("cu-float", call_varlen(*p0, CU.float()), TypeError, "cu_seqlens"),
    ("cu-2d", call_varlen(*p0, CU[None]), ValueError, "cu_seqlens"),
    ("cu-len-1", call_varlen(*p0, CU[:1]), ValueError, "cu_seqlens"),
    ("cu-not-0", call_varlen(*p0, torch.tensor([1, 4, 9], dtype=torch.int32)), ValueError, "cu_seqlens"),
    ("cu-decreasing", call_varlen(*p0, torch.tensor([0, 5, 4, 9], dtype=torch.int32)), ValueError, "cu_seqlens"),
    ("cu-short-end", call_varlen(*p0, torch.tensor([0, 4, 8], dtype=torch.int32)), ValueError, "cu_seqlens"),
    ("cu-long-end", call_varlen(*p0, torch.tensor([0, 4, 10], dtype=torch.int32)), ValueError, "cu_seqlens"),
    ("cu-wrong-device", call_varlen(*p0, CU.to("meta")), ValueError, "cu_seqlens"),
    ("max-seqlen-short", call_varlen(*p0, CU, max_seqlen=4), ValueError, "max_seqlen"),
    ("max-seqlen-float", call_varlen(*p0, CU, max_seqlen=5.0), TypeError, "max_seqlen"),
    # devices
    ("k-wrong-device", call_dense(q0, k0.to("meta"), v0), ValueError, "k"),
    ("v-wrong-device", call_varlen(p0[0], p0[1], p0[2].to("meta"), CU), ValueError, "v"),
    # softmax_scale
    ("scale-zero", call_dense(q0, k0, v0, softmax_scale=0.0), ValueError, "softmax_scale"),
    ("scale-negative", call_dense(q0, k0, v0, softmax_scale=-0.1), ValueError, "softmax_scale"),
    ("scale-nan", call_dense(q0, k0, v0, softmax_scale=math.nan), ValueError, "softmax_scale"),
    ("scale-inf", call_dense(q0, k0, v0, softmax_scale=math.inf), ValueError, "softmax_scale"),
    ("scale-f32-overflow", call_dense(q0, k0, v0, softmax_scale=1e300), ValueError, "softmax_scale"),
    ("scale-f32-underflow", call_dense(q0, k0, v0, softmax_scale=1e-300), ValueError, "softmax_scale"),
    ("scale-string", call_dense(q0, k0, v0, softmax_scale="0.1"), TypeError, "softmax_scale"),
    ("scale-tensor", call_dense(q0, k0, v0, softmax_scale=torch.tensor(0.1)), TypeError, "softmax_scale"),
    ("varlen-scale-nan", call_varlen(*p0, CU, softmax_scale=math.nan), ValueError, "softmax_scale"),
    # flags
    ("causal-string", call_dense(q0, k0, v0, causal="yes"), TypeError, "causal"),
    ("causal-2", call_dense(q0, k0, v0, causal=2), ValueError, "causal"),
    ("return-lse-none", call_dense(q0, k0, v0, return_lse=None), TypeError, "return_lse"),
    # low-level op
    ("pre-dout-shape", lambda: ops.bwd_preprocess(k0, v0, q0, q0[:, :2]), ValueError, "dout"),
    ("pre-dout-dtype", lambda: ops.bwd_preprocess(k0, v0, q0, q0.half()), TypeError, "dout"),
    ("pre-out-3d", lambda: ops.bwd_preprocess(k0, v0, q0[0], q0[0]), ValueError, "out"),
    ("pre-cu-int64", lambda: ops.bwd_preprocess(p0[1], p0[2], p0[0], p0[0], CU.long()), TypeError, "cu_seqlens"),
]


@pytest.mark.parametrize("call,exc,arg", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_invalid_argument(call, exc, arg):
    with pytest.raises(exc) as info:
        call()
    msg = str(info.value)
    assert re.search(rf"(?<![\w.]){re.escape(arg)}(?!\w)", msg), f"message does not name {arg!r}: {msg}"


def test_numpy_scale_and_int_flags_accepted():
    # Validation accepts numpy scalars and 0/1 flags.
    from fold_attention._validate import check_softmax_scale, require_flag

    assert check_softmax_scale(np.float32(0.25), D, "f") == 0.25
    assert check_softmax_scale(None, 64, "f") == 0.125
    assert require_flag(np.bool_(True), "causal", "f") is True
    assert require_flag(1, "causal", "f") is True


@pytest.mark.parametrize(
    "kwargs,exc,arg",
    [
        (dict(batch=0), ValueError, "batch"),
        (dict(batch=2.0), TypeError, "batch"),
        (dict(n_heads=0), ValueError, "n_heads"),
        (dict(n_kv_heads=3), ValueError, "n_kv_heads"),
        (dict(n_kv_heads="2"), TypeError, "n_kv_heads"),
        (dict(head_dim=0), ValueError, "head_dim"),
        (dict(head_dim=512), ValueError, "head_dim"),
        (dict(max_len=0), ValueError, "max_len"),
        (dict(depth=0), ValueError, "depth"),
        (dict(depth=math.inf), ValueError, "depth"),
        (dict(depth="16"), TypeError, "depth"),
        (dict(v8="no"), TypeError, "v8"),
        (dict(dtype=torch.float64), TypeError, "dtype"),
        (dict(dtype="bf16"), TypeError, "dtype"),
    ],
    ids=lambda x: str(x) if not isinstance(x, dict) else ",".join(x),
)
def test_kv_cache_constructor_validation(kwargs, exc, arg):
    args = dict(batch=2, n_heads=8, n_kv_heads=2, head_dim=128, max_len=1024)
    args.update(kwargs)
    with pytest.raises(exc) as info:
        fa.FoldKVCache(**args)
    assert re.search(rf"(?<![\w.]){re.escape(arg)}(?!\w)", str(info.value)), str(info.value)


@pytest.mark.parametrize("depth", [16, None, 4.5])
@pytest.mark.parametrize("v8", [False, True])
def test_kv_cache_builds_on_cpu(depth, v8):
    # Decode runs on the CPU reference; tests/python/test_decode_*.py cover it.
    cache = fa.FoldKVCache(batch=2, n_heads=8, n_kv_heads=2, head_dim=128, max_len=64, depth=depth, v8=v8)
    assert cache.depth == depth and cache.v8 == v8


def test_with_kvcache_needs_a_cache():
    q = torch.randn(2, 1, 8, 128)
    with pytest.raises(TypeError, match="cache"):
        fa.fold_attn_with_kvcache(q, None)


def test_other_device_is_not_implemented():
    q, k, v = (x.to("meta") for x in dense())
    with pytest.raises(NotImplementedError, match="meta"):
        fa.fold_attn_func(q, k, v)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_training_rejects_unsupported_configurations():
    # D = 16 is not one of the CUDA kernels' head dimensions; float32 has no CUDA kernel.
    q, k, v = (x.cuda().bfloat16() for x in dense())
    with pytest.raises(NotImplementedError, match="head_dim"):
        fa.fold_attn_func(q, k, v)
    cu = CU.cuda()
    qp, kp, vp = (x.cuda().bfloat16() for x in packed())
    with pytest.raises(NotImplementedError, match="head_dim"):
        fa.fold_attn_varlen_func(qp, kp, vp, cu)
    q, k, v = (x.cuda() for x in dense(D=64))
    with pytest.raises(NotImplementedError, match="float32"):
        fa.fold_attn_func(q, k, v)


def test_sparse_nested_and_overflowing_arguments_raise_the_documented_types():
    import fold_attention as fa

    q = torch.randn(1, 8, 2, 16)
    with pytest.raises(TypeError, match="q must be a dense"):
        fa.fold_attn_func(q.to_sparse(), q, q)
    with pytest.raises(ValueError, match="softmax_scale"):
        fa.fold_attn_func(q, q, q, softmax_scale=10**400)


def test_forward_mode_ad_is_refused():
    """The ops have a backward only: a jvp would otherwise return zero tangents silently."""
    q, k, v = dense()
    with pytest.raises(NotImplementedError, match="forward-mode AD"):
        torch.func.jvp(lambda a: fa.fold_attn_func(a, k, v), (q,), (torch.randn_like(q),))
    with pytest.raises(NotImplementedError, match="v carries a tangent"):
        torch.func.jvp(lambda c: fa.fold_attn_func(q, k, c), (v,), (torch.randn_like(v),))
    qp, kp, vp = packed()
    cu = torch.tensor([0, 3, T], dtype=torch.int32)
    import torch.autograd.forward_ad as fwad

    with fwad.dual_level():
        dual = fwad.make_dual(kp, torch.randn_like(kp))
        with pytest.raises(NotImplementedError, match="k carries a tangent"):
            fa.fold_attn_varlen_func(qp, dual, vp, cu)
