"""Our arms: fold_attention's training functions and its decode cache.

Until a kernel exists (the package raises NotImplementedError on CUDA tensors, or
cannot be imported on the machine at all) every candidate reports
"unavailable: <message>" and the suite goes on.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Optional

import torch

from ..harness import Candidate, Unavailable
from ..provenance import REPO_ROOT
from .problems import DecodeProblem, TrainProblem, fresh_leaves, grad_fn

DEFAULT_DEPTH = 16      # the rule fixed before the run: FoldKVCache's default depth
DEFAULT_V8 = False


def import_fold():
    """Import fold_attention, from the installed package or from python/ in the repo."""
    try:
        import fold_attention
        return fold_attention
    except ImportError as first:
        src = os.path.join(REPO_ROOT, "python")
        if os.path.isdir(os.path.join(src, "fold_attention")) and src not in sys.path:
            sys.path.insert(0, src)
            try:
                import fold_attention
                return fold_attention
            except Exception as e:
                raise Unavailable(f"import fold_attention failed: {type(e).__name__}: {e}")
        raise Unavailable(f"import fold_attention failed: {first}")
    except Exception as e:
        raise Unavailable(f"import fold_attention failed: {type(e).__name__}: {e}")


def version() -> str:
    try:
        fa = import_fold()
        return str(getattr(fa, "__version__", "unknown"))
    except Exception as e:
        return str(e)


def train_candidates(p: TrainProblem, mode: str) -> List[Candidate]:
    fa = import_fold()
    q, k, v = fresh_leaves(p.q, p.k, p.v)

    def fwd():
        if p.varlen:
            return fa.fold_attn_varlen_func(q, k, v, p.cu_seqlens, causal=p.causal)
        return fa.fold_attn_func(q, k, v, causal=p.causal)
    if mode == "fwd":
        fn = fwd
    else:
        try:
            out = fwd()
        except Exception as e:
            raise Unavailable(f"{type(e).__name__}: {e}")
        fn = grad_fn(out, (q, k, v), p.dout)
    cands = [Candidate(arm="fold", config={}, fn=fn, deterministic=True)]
    # A/B of kernel variants in one process (FOLD_BENCH_VARIANTS=ws,wsn): one more candidate
    # per variant, each with its own record. For comparing variants only: the summary takes
    # the fastest fold candidate as "ours", so a protocol run leaves this unset.
    for var in filter(None, os.environ.get("FOLD_BENCH_VARIANTS", "").split(",")):
        cands.append(Candidate(arm="fold", config={"variant": var}, fn=_with_variant(fn, mode, var),
                               deterministic=True))
    return cands


def _with_variant(fn, mode: str, var: str):
    """fn with FOLD_FWD_VARIANT / FOLD_BWD_VARIANT (read by the library at every call) set to
    var during the call (graph capture included); a var of the form NAME=VALUE sets that
    variable instead (another setting read at every call, e.g. FOLD_FWD_HB_CHUNK=64)."""
    name = "FOLD_FWD_VARIANT" if mode == "fwd" else "FOLD_BWD_VARIANT"
    if "=" in var:
        name, var = var.split("=", 1)

    def run():
        old = os.environ.pop(name, None)
        os.environ[name] = var
        try:
            return fn()
        finally:
            os.environ.pop(name, None)
            if old is not None:
                os.environ[name] = old
    return run


def _cache_stats(cache) -> Dict[str, Any]:
    """The cache's counters after a step, if it offers them: `cache.stats()` (or a
    `stats` / `last_stats` / `decode_stats` dict) with the fractions of keys that were
    live (`live_frac`: V read), refined (`refine_frac`: K plane B read) and, with v8,
    V-refined (`v_refine_frac`). Without them bytes are counted as for dense."""
    for name in ("stats", "last_stats", "decode_stats"):
        s = getattr(cache, name, None)
        if s is None:
            continue
        try:
            s = s() if callable(s) else s
            if isinstance(s, dict):
                return {k: (v.item() if torch.is_tensor(v) and v.numel() == 1 else v)
                        for k, v in s.items() if not torch.is_tensor(v) or v.numel() == 1}
        except Exception:
            pass
    return {}


def build_cache(p: DecodeProblem, depth: Optional[int], v8: bool, prefill_q: Optional[torch.Tensor] = None,
                max_len: Optional[int] = None, page_size: Optional[int] = None):
    """A FoldKVCache holding p.k/p.v (one request per batch row, full length); its capacity
    max_len (default the length + 64), its page size page_size (default the cache's)."""
    fa = import_fold()
    B, H, Hkv, L, D = p.batch, p.heads, p.kv_heads, p.context, p.head_dim
    pages = {} if page_size is None else {"page_size": page_size}
    try:
        cache = fa.FoldKVCache(batch=B, n_heads=H, n_kv_heads=Hkv, head_dim=D,
                               max_len=max_len if max_len is not None else L + 64,
                               depth=depth, v8=v8, dtype=p.q.dtype, device=p.q.device, **pages)
        k = p.k.transpose(1, 2).reshape(B * L, Hkv, D)
        v = p.v.transpose(1, 2).reshape(B * L, Hkv, D)
        q = prefill_q if prefill_q is not None else torch.randn(B * L, H, D, device=k.device, dtype=k.dtype)
        cu = torch.arange(0, B + 1, dtype=torch.int32, device=k.device) * L
        cache.prefill(q, k, v, cu)
    except Exception as e:
        raise Unavailable(f"FoldKVCache: {type(e).__name__}: {e}")
    return cache


def decode_step(fa, cache, q, k_step=None, v_step=None):
    """One step; q (B, H, D) -> out (B, H, D)."""
    B, H, D = q.shape
    o = fa.fold_attn_with_kvcache(q.view(B, 1, H, D), cache, k_step, v_step)
    o = o[0] if isinstance(o, (tuple, list)) else o
    return o.reshape(B, H, D)


def _raiser(e):
    def f():
        raise e
    return f


def decode_candidates(p: DecodeProblem, depths=(None, 8, 12, 16, 20, 24), v8s=(False, True)) -> List[Candidate]:
    fa = import_fold()
    cands = []
    for v8 in v8s:
        for depth in depths:
            try:
                cache = build_cache(p, depth, v8)
                fn = (lambda cache=cache: decode_step(fa, cache, p.q, None, None))
                meta = {"stats": _cache_stats(cache), "cache": cache}
            except Exception as e:
                fn = _raiser(e)
                meta = {"stats": {}, "cache": None}
            cands.append(Candidate(arm="fold", config={"depth": depth, "v8": v8}, fn=fn, deterministic=True,
                                   meta=meta))
    return cands
