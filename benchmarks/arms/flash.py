"""FlashAttention-3 (`flash_attn_interface`, hopper build) and FlashAttention-4
(`flash_attn.cute`), both optional. FA3 is tuned over its deterministic flag
(backward), num_splits and pack_gqa (decode)."""
from __future__ import annotations

from typing import List

import torch

from ..harness import Candidate, Unavailable
from .problems import DecodeProblem, TrainProblem, fresh_leaves, grad_fn


def _fa3():
    try:
        import flash_attn_interface as fa3
        return fa3
    except Exception as e:
        raise Unavailable(f"import flash_attn_interface (FA3) failed: {type(e).__name__}: {e}")


def _fa4():
    try:
        from flash_attn.cute import interface as fa4
        return fa4
    except Exception as e:
        raise Unavailable(f"import flash_attn.cute (FA4) failed: {type(e).__name__}: {e}")


def _first(x):
    return x[0] if isinstance(x, (tuple, list)) else x


def train_candidates(p: TrainProblem, mode: str, which: str = "fa3", deterministic: bool = False) -> List[Candidate]:
    mod = _fa3() if which == "fa3" else _fa4()
    q, k, v = fresh_leaves(p.q, p.k, p.v)
    kw = {"causal": p.causal}
    if deterministic:
        kw["deterministic"] = True

    def fwd():
        if p.varlen:
            cu = p.cu_seqlens
            m = max(p.seqlens)
            return _first(mod.flash_attn_varlen_func(q, k, v, cu, cu, m, m, **kw))
        return _first(mod.flash_attn_func(q, k, v, **kw))
    fn = fwd if mode == "fwd" else grad_fn(fwd(), (q, k, v), p.dout)
    return [Candidate(arm=which + (".det" if deterministic else ""), config={}, fn=fn,
                      deterministic=deterministic)]


def decode_candidates(p: DecodeProblem) -> List[Candidate]:
    fa3 = _fa3()
    B, H, D = p.batch, p.heads, p.head_dim
    kc = p.k.transpose(1, 2).contiguous()
    vc = p.v.transpose(1, 2).contiguous()
    q4 = p.q.view(B, 1, H, D)
    seqlens = torch.full((B,), p.context, dtype=torch.int32, device=p.q.device)
    cands = []
    for ns in (0, 1):
        for pack in (None, True):
            def fn(ns=ns, pack=pack):
                kw = {"cache_seqlens": seqlens, "num_splits": ns, "softmax_scale": p.softmax_scale}
                if pack is not None:
                    kw["pack_gqa"] = pack
                return _first(fa3.flash_attn_with_kvcache(q4, kc, vc, **kw)).view(B, H, D)
            cands.append(Candidate(arm="fa3", config={"num_splits": ns, "pack_gqa": pack}, fn=fn,
                                   meta={"bytes_per_key": 4 * D}))
    return cands
