"""Shared by the forward, backward and invariance suites: training shapes, inputs,
the FP32 reference and the arms."""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import torch

from . import device as dev
import torch.nn.functional as F

from . import flops
from .arms import flash, flex, fold, sdpa
from .arms.problems import TrainProblem

# (B, S, H, H_kv, D); a varlen mix is given by its sequence lengths instead of B, S.
FULL_SHAPES = [(8, 2048, 16, 16, 128), (4, 4096, 32, 8, 128), (2, 8192, 32, 8, 128), (8, 2048, 32, 32, 64),
               (4, 4096, 32, 8, 64), (1, 16384, 16, 16, 128)]
QUICK_SHAPES = [(8, 2048, 16, 16, 128), (4, 4096, 32, 8, 128), (2, 8192, 32, 8, 128), (8, 2048, 32, 32, 64)]
VARLEN_MIX = [3000, 512, 1024, 4096, 257, 2048, 777, 1408, 2048, 1212]   # 16,382 tokens
# The training issue's list (its targets are stated on these), causal and non-causal, and its
# varlen mix: 16 sequences of 256 to 4096 tokens (fixed, irregular lengths; 29,186 tokens).
ISSUE_SHAPES = [(2, 8192, 32, 8, 128), (4, 4096, 32, 8, 128), (8, 2048, 16, 16, 128), (8, 2048, 32, 32, 64),
                (2, 8192, 64, 8, 64), (16, 1024, 32, 8, 128)]
ISSUE_VARLEN_MIX = [256, 4096, 1024, 3000, 512, 2048, 777, 4000, 1408, 300, 2500, 1212, 3333, 640, 2816, 1264]
VARLEN_HEADS = (32, 8, 128)
DRY_SHAPES = [(2, 128, 4, 2, 32), (1, 96, 2, 2, 16)]
DRY_VARLEN = [64, 100, 37]
DRY_VARLEN_HEADS = (4, 2, 32)


def make_problem(shape, causal: bool = True, seed: int = 0, varlen: Optional[Sequence[int]] = None,
                 heads=None) -> TrainProblem:
    g = dev.generator(seed)
    kw = dict(device=dev.DEVICE, dtype=torch.bfloat16, generator=g)
    if varlen is not None:
        H, Hkv, D = heads
        T = sum(varlen)
        q = torch.randn(T, H, D, **kw)
        k = torch.randn(T, Hkv, D, **kw)
        v = torch.randn(T, Hkv, D, **kw)
        do = torch.randn(T, H, D, **kw)
        cu = torch.tensor([0] + list(torch.tensor(varlen).cumsum(0).tolist()), dtype=torch.int32, device=dev.DEVICE)
        return TrainProblem(q, k, v, do, causal=causal, seqlens=list(varlen), cu_seqlens=cu)
    B, S, H, Hkv, D = shape
    q = torch.randn(B, S, H, D, **kw)
    k = torch.randn(B, S, Hkv, D, **kw)
    v = torch.randn(B, S, Hkv, D, **kw)
    do = torch.randn(B, S, H, D, **kw)
    return TrainProblem(q, k, v, do, causal=causal)


def case_name(p: TrainProblem) -> str:
    c = "causal" if p.causal else "full"
    if p.varlen:
        return f"varlen{len(p.seqlens)}x{sum(p.seqlens)}-H{p.heads}/{p.kv_heads}-D{p.head_dim}-{c}"
    B, S = p.q.shape[0], p.q.shape[1]
    return f"B{B}-S{S}-H{p.heads}/{p.kv_heads}-D{p.head_dim}-{c}"


def fwd_flops(p: TrainProblem) -> float:
    if p.varlen:
        return flops.varlen_fwd_flops(p.seqlens, p.heads, p.head_dim, p.causal)
    B, S = p.q.shape[0], p.q.shape[1]
    return flops.attn_fwd_flops(B, p.heads, S, S, p.head_dim, p.causal)


def _ref_dense(q, k, v, do, causal):
    """fp32 attention forward+backward on (B, S, H, D) (efficient backend, math fallback)."""
    G = q.shape[2] // k.shape[2]
    q32, k32, v32 = (t.detach().float().requires_grad_(True) for t in (q, k, v))
    ke = k32.repeat_interleave(G, dim=2) if G > 1 else k32
    ve = v32.repeat_interleave(G, dim=2) if G > 1 else v32
    from torch.nn.attention import SDPBackend, sdpa_kernel
    last = None
    for be in ([SDPBackend.EFFICIENT_ATTENTION], [SDPBackend.MATH]):
        try:
            with sdpa_kernel(be):
                o = F.scaled_dot_product_attention(q32.transpose(1, 2), ke.transpose(1, 2), ve.transpose(1, 2),
                                                   is_causal=causal).transpose(1, 2)
                dq, dk, dv = torch.autograd.grad(o, (q32, k32, v32), do.float())
            return o.detach(), dq, dk, dv
        except Exception as e:  # pragma: no cover
            last = e
    raise last


def reference(p: TrainProblem):
    """(out, dq, dk, dv) in fp32, computed once per case."""
    if not p.varlen:
        if p.q.shape[0] > 1 and p.q.shape[1] >= 8192:
            parts = [_ref_dense(p.q[b:b + 1], p.k[b:b + 1], p.v[b:b + 1], p.dout[b:b + 1], p.causal)
                     for b in range(p.q.shape[0])]
            return tuple(torch.cat([x[i] for x in parts], 0) for i in range(4))
        return _ref_dense(p.q, p.k, p.v, p.dout, p.causal)
    outs = [[], [], [], []]
    start = 0
    for s in p.seqlens:
        sl = slice(start, start + s)
        r = _ref_dense(p.q[sl][None], p.k[sl][None], p.v[sl][None], p.dout[sl][None], p.causal)
        for i in range(4):
            outs[i].append(r[i][0])
        start += s
    return tuple(torch.cat(o, 0) for o in outs)


def builders(p: TrainProblem, mode: str, want_flex: bool, deterministic_arms: bool = True):
    """(arm name, candidate builder) for every training arm."""
    b: List[Tuple[str, Any]] = [("sdpa", lambda: sdpa.train_candidates(p, mode))]
    if mode == "bwd" and deterministic_arms:
        b.append(("sdpa.det", lambda: sdpa.train_candidates(p, mode, deterministic=True)))
    if want_flex:
        b.append(("flex", lambda: flex.train_candidates(p, mode)))
    b.append(("fa3", lambda: flash.train_candidates(p, mode, "fa3")))
    if mode == "bwd":
        b.append(("fa3.det", lambda: flash.train_candidates(p, mode, "fa3", deterministic=True)))
    b.append(("fa4", lambda: flash.train_candidates(p, mode, "fa4")))
    b.append(("fold", lambda: fold.train_candidates(p, mode)))
    return b
