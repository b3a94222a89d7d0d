"""Bytes read per key per KV head, for every decode arm.

Decode is a read: its time is set by the bytes it must fetch. Every arm reports
the bytes it reads per key per KV head, and the total for the case; dividing by
the measured time gives its read bandwidth, compared with the ceiling measured
in the same run (benchmarks/ceiling.py).

FoldAttention (ALGORITHMS.md sections 3-4), at head dim D:
  plane A of K   : D int8 + 2 bytes of per-key scale   (read for every key)
  plane B of K   : D int8                               (only refined keys)
  V, bf16        : 2D                                   (only live keys)
  V, v8          : plane A D (live keys) + plane B D (refine-V keys)
A dense fold cache at D=128 reads 130 + 128 + 256 = 514 bytes per key, a bf16
cache 512, plane A alone 130.
"""
from __future__ import annotations

from typing import Optional


def bf16_kv_bytes_per_key(head_dim: int, elem_bytes: int = 2) -> int:
    """A contiguous K+V cache read once: 2 * D * elem_bytes."""
    return 2 * head_dim * elem_bytes


def fold_bytes_per_key(head_dim: int, live_frac: float = 1.0, refine_frac: Optional[float] = None,
                       v8: bool = False, v_refine_frac: Optional[float] = None,
                       scale_bytes: int = 2) -> float:
    """Expected bytes read per key per KV head by the fold decode.

    live_frac: fraction of keys whose V is read (1.0 for depth=None).
    refine_frac: fraction of keys that also read plane B of K (default: live_frac).
    v_refine_frac: with v8, fraction of keys reading V plane B (default: live_frac).
    """
    for name, f in (("live_frac", live_frac), ("refine_frac", refine_frac),
                    ("v_refine_frac", v_refine_frac)):
        if f is not None and not 0.0 <= f <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {f}")
    if refine_frac is None:
        refine_frac = live_frac
    if v_refine_frac is None:
        v_refine_frac = live_frac
    d = head_dim
    k_bytes = (d + scale_bytes) + refine_frac * d
    if v8:
        v_bytes = live_frac * d + v_refine_frac * d
    else:
        v_bytes = live_frac * 2 * d
    return k_bytes + v_bytes


def case_bytes(batch: int, n_kv_heads: int, context: int, bytes_per_key: float,
               head_dim: int = 0, n_heads: int = 0, q_out_bytes: int = 2) -> float:
    """Total bytes read for one decode step of a case (the KV stream dominates;
    q and out are added for completeness: n_heads * D * 2 bytes each per request)."""
    kv = batch * n_kv_heads * context * bytes_per_key
    qo = batch * n_heads * head_dim * q_out_bytes * 2
    return kv + qo


def bandwidth_tbs(nbytes: float, seconds: float) -> float:
    return nbytes / seconds / 1e12 if seconds > 0 else float("nan")


def pct_of_ceiling(tbs: float, ceiling_tbs: Optional[float]) -> Optional[float]:
    if not ceiling_tbs or ceiling_tbs <= 0:
        return None
    return 100.0 * tbs / ceiling_tbs
