"""Shared test helpers: a float64 reference, torch SDPA as the accuracy bar, runners."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

import fold_attention as fa

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
HALF_DTYPES = (torch.bfloat16, torch.float16)

BITS_VIEW = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}


def gen(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def randn(shape, dtype, seed, scale=1.0):
    return (torch.randn(shape, generator=gen(seed), dtype=torch.float32) * scale).to(dtype)


def randn_on(shape, dtype, seed, scale=1.0, device="cuda"):
    """randn with a generator on `device` (the GPU tests' inputs: drawn where they are used)."""
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return (torch.randn(shape, generator=g, device=device, dtype=torch.float32) * scale).to(dtype)


def window_mask(S, causal, window, device="cuda"):
    """(S, S) bool: query i sees key j under `causal` and FlashAttention's window_size=(left,
    right) (-1: unbounded), the rule the kernels apply, written out for SDPA / float64."""
    i = torch.arange(S, device=device).unsqueeze(1)
    j = torch.arange(S, device=device).unsqueeze(0)
    keep = torch.ones(S, S, dtype=torch.bool, device=device)
    if causal:
        keep &= j <= i
    if window[0] >= 0:
        keep &= j >= i - window[0]
    if window[1] >= 0:
        keep &= j <= i + window[1]
    return keep


def make_dense(B, S, H, Hkv, D, dtype, seed=0, scale=1.0):
    """q, k, v, dout for a dense problem (fresh leaves, no grad)."""
    q = randn((B, S, H, D), dtype, seed, scale)
    k = randn((B, S, Hkv, D), dtype, seed + 1, scale)
    v = randn((B, S, Hkv, D), dtype, seed + 2)
    dout = randn((B, S, H, D), dtype, seed + 3)
    return q, k, v, dout


def make_dense_on(B, S, H, Hkv, D, dtype, seed=0, device="cuda"):
    """make_dense's q, k, v, dout drawn on `device` (randn_on: the GPU tests' inputs)."""
    return (randn_on((B, S, H, D), dtype, seed, device=device),
            randn_on((B, S, Hkv, D), dtype, seed + 1, device=device),
            randn_on((B, S, Hkv, D), dtype, seed + 2, device=device),
            randn_on((B, S, H, D), dtype, seed + 3, device=device))


def make_varlen(lengths, H, Hkv, D, dtype, seed=0, scale=1.0):
    """q, k, v, dout and cu_seqlens for packed sequences of the given lengths."""
    total = sum(lengths)
    q = randn((total, H, D), dtype, seed, scale)
    k = randn((total, Hkv, D), dtype, seed + 1, scale)
    v = randn((total, Hkv, D), dtype, seed + 2)
    dout = randn((total, H, D), dtype, seed + 3)
    return q, k, v, dout, cu_from_lengths(lengths)


def cu_from_lengths(lengths):
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    return torch.tensor(cu, dtype=torch.int32)


def default_scale(D):
    return 1.0 / math.sqrt(D)


# ---- float64 reference ---------------------------------------------------------------

def _ref_core(q, k, v, causal, scale):
    """q (B,S,H,D), k/v (B,S,Hkv,D), all float64 -> out (B,S,H,D), lse (B,H,S)."""
    H, Hkv = q.shape[2], k.shape[2]
    rep = H // Hkv
    k = k.repeat_interleave(rep, dim=2)
    v = v.repeat_interleave(rep, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q, k) * scale
    if causal:
        S = q.shape[1]
        mask = torch.ones(S, S, dtype=torch.bool).triu(1)
        s = s.masked_fill(mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.unsqueeze(-1))
    out = torch.einsum("bhij,bjhd->bihd", p, v)
    return out, lse


def ref_dense(q, k, v, dout, causal, scale):
    """Float64 out, lse (B,H,S), dq, dk, dv."""
    q64, k64, v64 = (x.detach().double().requires_grad_(True) for x in (q, k, v))
    out, lse = _ref_core(q64, k64, v64, causal, scale)
    out.backward(dout.double())
    return out.detach(), lse.detach(), q64.grad, k64.grad, v64.grad


def ref_varlen(q, k, v, dout, cu, causal, scale):
    """Float64 out, lse (H,T), dq, dk, dv for packed inputs (per-sequence loop)."""
    T, H, D = q.shape
    out = torch.zeros(T, H, D, dtype=torch.float64)
    lse = torch.zeros(H, T, dtype=torch.float64)
    dq = torch.zeros(T, H, D, dtype=torch.float64)
    dk = torch.zeros(k.shape, dtype=torch.float64)
    dv = torch.zeros(v.shape, dtype=torch.float64)
    cu = cu.tolist()
    for b in range(len(cu) - 1):
        lo, hi = cu[b], cu[b + 1]
        if hi == lo:
            continue
        sl = slice(lo, hi)
        o, l, gq, gk, gv = ref_dense(
            q[sl][None], k[sl][None], v[sl][None], dout[sl][None], causal, scale
        )
        out[sl], lse[:, sl], dq[sl], dk[sl], dv[sl] = o[0], l[0], gq[0], gk[0], gv[0]
    return out, lse, dq, dk, dv


# ---- torch SDPA in the input dtype (the accuracy bar) --------------------------------

def sdpa_dense(q, k, v, dout, causal, scale):
    """torch SDPA forward and backward in the inputs' dtype: out, dq, dk, dv."""
    qs, ks, vs = (x.detach().transpose(1, 2).contiguous().requires_grad_(True) for x in (q, k, v))
    out = F.scaled_dot_product_attention(
        qs, ks, vs, is_causal=causal, scale=scale, enable_gqa=q.shape[2] != k.shape[2]
    )
    out.backward(dout.transpose(1, 2))
    return tuple(x.transpose(1, 2) for x in (out.detach(), qs.grad, ks.grad, vs.grad))


def sdpa_varlen(q, k, v, dout, cu, causal, scale):
    out, dq = torch.zeros_like(q), torch.zeros_like(q)
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    cu = cu.tolist()
    for b in range(len(cu) - 1):
        lo, hi = cu[b], cu[b + 1]
        if hi == lo:
            continue
        sl = slice(lo, hi)
        o, gq, gk, gv = sdpa_dense(
            q[sl][None], k[sl][None], v[sl][None], dout[sl][None], causal, scale
        )
        out[sl], dq[sl], dk[sl], dv[sl] = o[0], gq[0], gk[0], gv[0]
    return out, dq, dk, dv


# ---- FoldAttention runners -----------------------------------------------------------

def fold_dense(q, k, v, dout, causal, scale=None):
    """out, lse (B,H,S), dq, dk, dv from fold_attn_func (forward + backward)."""
    qg, kg, vg = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    out, lse = fa.fold_attn_func(qg, kg, vg, causal=causal, softmax_scale=scale, return_lse=True)
    out.backward(dout)
    return out.detach(), lse, qg.grad, kg.grad, vg.grad


def fold_varlen(q, k, v, dout, cu, causal, scale=None, max_seqlen=None):
    """out, lse (H,T), dq, dk, dv from fold_attn_varlen_func (forward + backward)."""
    qg, kg, vg = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    out, lse = fa.fold_attn_varlen_func(
        qg, kg, vg, cu, max_seqlen=max_seqlen, causal=causal, softmax_scale=scale,
        return_lse=True,
    )
    out.backward(dout)
    return out.detach(), lse, qg.grad, kg.grad, vg.grad


# ---- comparisons ----------------------------------------------------------------------

def rel_err(x, ref):
    """Relative Frobenius error ||x - ref|| / ||ref|| (absolute when ref is all zero)."""
    ref = ref.double()
    diff = (x.double() - ref).norm().item()
    denom = ref.norm().item()
    return diff / denom if denom > 0 else diff


def bits(x):
    return x.contiguous().view(BITS_VIEW[x.dtype])


def assert_bitwise_equal(a, b, what=""):
    assert a.dtype == b.dtype and a.shape == b.shape, f"{what}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}"
    ba, bb = bits(a), bits(b)
    if not torch.equal(ba, bb):
        n = (ba != bb).sum().item()
        raise AssertionError(f"{what}: {n} of {a.numel()} elements differ in their bits")


def gpu_ready() -> tuple[bool, str]:
    """(True, "") where the GPU tests can run: a CUDA device and a library built with CUDA."""
    if not torch.cuda.is_available():
        return False, "no CUDA device"
    try:
        if not fa.built_with_cuda():
            return False, "library built without CUDA"
    except OSError as exc:  # library not found: let the CPU tests report that
        return False, str(exc)
    return True, ""

