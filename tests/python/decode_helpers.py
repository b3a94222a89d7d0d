"""Synthetic decode caches and a float64 reference for the decode tests."""

from __future__ import annotations

import math

import torch

import fold_attention as fa


def synth(B, Hkv, G, D, L, seed, tail=3.0, offset=2.0, dtype=torch.bfloat16):
    """q (B, H, D), k/v (B, L, Hkv, D): keys with a heavy tail along a direction u that the
    queries favour (heavy logit tails), values offset from zero by `offset`."""
    g = torch.Generator().manual_seed(seed)
    H = Hkv * G
    u = torch.randn(B, Hkv, D, generator=g)
    u = u / u.norm(dim=-1, keepdim=True)
    e = torch.empty(B, L, Hkv).exponential_(1.0, generator=g)
    k = torch.randn(B, L, Hkv, D, generator=g) + (tail * e ** 1.5).unsqueeze(-1) * u.unsqueeze(1)
    v = torch.randn(B, L, Hkv, D, generator=g) + offset
    q = torch.randn(B, H, D, generator=g) * 0.5 + 2.0 * u.repeat_interleave(G, 1)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def reference(q, ks, vs, scale):
    """Float64 attention of q (H, D) over k/v (L, Hkv, D): out (H, D), natural LSE (H,)."""
    H, Hkv = q.shape[0], ks.shape[1]
    G = H // Hkv
    K = ks.double().repeat_interleave(G, 1)
    V = vs.double().repeat_interleave(G, 1)
    s = torch.einsum("hd,jhd->hj", q.double(), K) * scale
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[:, None])
    return torch.einsum("hj,jhd->hd", p, V), lse


def rel_err(x, ref):
    ref = ref.double()
    return ((x.double() - ref).norm() / ref.norm()).item()


def floor_err(ref, dtype=torch.bfloat16):
    return rel_err(ref.to(dtype), ref)


def filled_cache(k, v, lengths, H, **kw):
    """A cache whose request b holds k[b, :lengths[b]] (written with extend)."""
    B, _, Hkv, D = k.shape
    cache = fa.FoldKVCache(B, H, Hkv, D, kw.pop("max_len", max(max(lengths), 1)), dtype=k.dtype, **kw)
    for b in range(B):
        assert cache.add_request() == b
        cache.extend(b, k[b, : lengths[b]], v[b, : lengths[b]])
    return cache


def default_scale(D):
    return 1.0 / math.sqrt(D)
