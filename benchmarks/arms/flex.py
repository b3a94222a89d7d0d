"""FlexAttention (torch.compile'd, Triton). Causal via a block mask; varlen via a
document mask over the packed sequence; GQA via enable_gqa. Each new shape costs a
compile (tens of seconds), so suites use it on a subset of shapes in quick mode."""
from __future__ import annotations

from typing import List

import torch

from ..harness import Candidate, Unavailable
from .problems import DecodeProblem, TrainProblem, fresh_leaves, grad_fn

_COMPILED = None


def _flex():
    global _COMPILED
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except Exception as e:
        raise Unavailable(f"torch.nn.attention.flex_attention: {e}")
    if _COMPILED is None:
        _COMPILED = torch.compile(flex_attention, dynamic=False)
    return _COMPILED, create_block_mask


def train_candidates(p: TrainProblem, mode: str) -> List[Candidate]:
    flex, create_block_mask = _flex()
    q, k, v = fresh_leaves(p.q, p.k, p.v)
    if p.varlen:
        T = q.shape[0]
        doc = torch.repeat_interleave(torch.arange(len(p.seqlens), device=q.device),
                                      torch.tensor(p.seqlens, device=q.device))

        def mask_mod(b, h, qi, ki):
            m = doc[qi] == doc[ki]
            return (m & (qi >= ki)) if p.causal else m
        bm = create_block_mask(mask_mod, 1, None, T, T, device=q.device)
        qq = lambda t: t.transpose(0, 1).unsqueeze(0)  # noqa: E731
    else:
        S = q.shape[1]
        if p.causal:
            bm = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, S, S, device=q.device)
        else:
            bm = None
        qq = lambda t: t.transpose(1, 2)  # noqa: E731

    def fwd():
        o = flex(qq(q), qq(k), qq(v), block_mask=bm, enable_gqa=(p.group > 1))
        if p.varlen:
            return o.squeeze(0).transpose(0, 1)
        return o.transpose(1, 2)

    if mode == "fwd":
        fn = fwd
    else:
        out = fwd()
        fn = grad_fn(out, (q, k, v), p.dout)
    # FlexAttention's backward computes dQ and dK/dV in separate loops without
    # atomics: declared deterministic (the suite still checks bitwise repeat).
    return [Candidate(arm="flex", config={"mask": "block_mask" if (p.causal or p.varlen) else "none"},
                      fn=fn, deterministic=True)]


def decode_candidates(p: DecodeProblem) -> List[Candidate]:
    flex, _ = _flex()
    B, H, D = p.batch, p.heads, p.head_dim
    qv = p.q.view(B, H, 1, D)

    def fn():
        return flex(qv, p.k, p.v, enable_gqa=(p.group > 1), scale=p.softmax_scale).view(B, H, D)
    return [Candidate(arm="flex", config={}, fn=fn, meta={"bytes_per_key": 4 * D})]
