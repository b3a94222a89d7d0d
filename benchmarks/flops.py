"""FLOP conventions (FlashAttention's): forward = 4*B*H*S_q*S_k*D, halved when causal
with S_q == S_k; backward = 2.5 x forward. Varlen sums over the sequences."""
from __future__ import annotations

from typing import Iterable


def attn_fwd_flops(batch: int, heads: int, seqlen_q: int, seqlen_k: int, head_dim: int,
                   causal: bool) -> float:
    f = 4.0 * batch * heads * seqlen_q * seqlen_k * head_dim
    return f / 2.0 if causal else f


def attn_bwd_flops(batch: int, heads: int, seqlen_q: int, seqlen_k: int, head_dim: int,
                   causal: bool) -> float:
    return 2.5 * attn_fwd_flops(batch, heads, seqlen_q, seqlen_k, head_dim, causal)


def varlen_fwd_flops(seqlens: Iterable[int], heads: int, head_dim: int, causal: bool) -> float:
    return sum(attn_fwd_flops(1, heads, s, s, head_dim, causal) for s in seqlens)


def tflops(flops: float, seconds: float) -> float:
    return flops / seconds / 1e12 if seconds > 0 else float("nan")
