"""Decode: FoldKVCache and fold_attn_with_kvcache.

The decode kernels are not in this build yet. The constructor validates its arguments
(so the interface is fixed and testable) and then raises NotImplementedError.
"""

from __future__ import annotations

import math
import numbers

import torch

from ._lib import FOLD_MAX_HEAD_DIM
from ._validate import require_flag, require_int

__all__ = ["FoldKVCache", "fold_attn_with_kvcache"]

_NOT_BUILT = "decode is not implemented in this build yet"
_CACHE_DTYPES = (torch.bfloat16, torch.float16)


class FoldKVCache:
    """One layer's paged KV cache for FoldAttention decode.

    Args:
        batch: number of request slots, >= 1.
        n_heads: query heads, >= 1.
        n_kv_heads: key/value heads, >= 1, dividing n_heads.
        head_dim: 1..256.
        max_len: tokens per request slot, >= 1.
        depth: binades below the reference that a key may fall and stay live; None for
            dense decode. A positive finite number.
        v8: store values in two E4M3 planes.
        dtype: dtype of queries and outputs (torch.bfloat16 or torch.float16).
        device: where the cache lives (a CUDA device).
    """

    def __init__(
        self,
        batch,
        n_heads,
        n_kv_heads,
        head_dim,
        max_len,
        depth=16,
        v8=False,
        dtype=torch.bfloat16,
        device=None,
    ):
        fn = "FoldKVCache"
        self.batch = require_int(batch, "batch", fn, minimum=1)
        self.n_heads = require_int(n_heads, "n_heads", fn, minimum=1)
        self.n_kv_heads = require_int(n_kv_heads, "n_kv_heads", fn, minimum=1)
        if self.n_heads % self.n_kv_heads != 0:
            raise ValueError(
                f"{fn}: n_heads ({self.n_heads}) must be a multiple of n_kv_heads "
                f"({self.n_kv_heads})"
            )
        self.head_dim = require_int(
            head_dim, "head_dim", fn, minimum=1, maximum=FOLD_MAX_HEAD_DIM
        )
        self.max_len = require_int(max_len, "max_len", fn, minimum=1)
        if depth is not None:
            if isinstance(depth, bool) or not isinstance(depth, numbers.Real):
                raise TypeError(f"{fn}: depth must be a number or None, got {type(depth).__name__}")
            if not math.isfinite(float(depth)) or float(depth) <= 0:
                raise ValueError(f"{fn}: depth must be finite and > 0 (or None), got {depth!r}")
        self.depth = depth
        self.v8 = require_flag(v8, "v8", fn)
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"{fn}: dtype must be a torch.dtype, got {type(dtype).__name__}")
        if dtype not in _CACHE_DTYPES:
            raise TypeError(f"{fn}: dtype must be torch.bfloat16 or torch.float16, got {dtype}")
        self.dtype = dtype
        if device is not None and not isinstance(device, (str, int, torch.device)):
            raise TypeError(f"{fn}: device must be a torch.device, str or int, got {type(device).__name__}")
        self.device = torch.device(device) if device is not None else None
        raise NotImplementedError(f"{fn}: {_NOT_BUILT}")

    def prefill(self, q, k, v, cu_seqlens):  # pragma: no cover - unreachable for now
        raise NotImplementedError(f"FoldKVCache.prefill: {_NOT_BUILT}")


def fold_attn_with_kvcache(q, cache, k=None, v=None, **kwargs):
    """Optionally append one token per request to `cache`, then attend over it."""
    raise NotImplementedError(f"fold_attn_with_kvcache: {_NOT_BUILT}")
