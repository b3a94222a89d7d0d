"""torch.nn.functional.scaled_dot_product_attention, one arm per backend.

Backends: cuDNN, FLASH (FlashAttention-2), EFFICIENT (mem-efficient). Tuned over
GQA handling: enable_gqa=True, or K/V expanded to H heads inside the timed work
(training), or, for one-token decode, the G query heads of a KV head packed as G
query rows (reads K/V once, like enable_gqa). Deterministic arms run the backward
under torch.use_deterministic_algorithms(True) (FA2's deterministic flag).
"""
from __future__ import annotations

from typing import List

import torch
import torch.nn.functional as F

from ..harness import Candidate, Unavailable
from .problems import DecodeProblem, TrainProblem, fresh_leaves, grad_fn, wrap_deterministic, deterministic_mode

try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
except Exception:  # pragma: no cover
    BACKENDS = {}


def _sdpa(backend, q, k, v, causal, gqa, scale=None):
    with sdpa_kernel([backend]):
        if gqa:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True, scale=scale)
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def _gqa_modes(group: int) -> List[str]:
    return ["mha"] if group == 1 else ["enable_gqa", "expand"]


def default_backends():
    """cuDNN, FLASH, EFFICIENT on a GPU; the math backend in a CPU dry run."""
    from .. import device as dev
    return ("math",) if dev.DRY else ("cudnn", "flash", "efficient")


def train_candidates(p: TrainProblem, mode: str, backends=None,
                     deterministic: bool = False) -> List[Candidate]:
    """mode 'fwd' or 'bwd'. Dense problems are (B,S,H,D) -> SDPA's (B,H,S,D) views.
    Varlen problems run one SDPA call per sequence (config gqa..., layout=loop)."""
    if not BACKENDS:
        raise Unavailable("torch.nn.attention.sdpa_kernel missing")
    cands = []
    for bname in backends or default_backends():
        be = BACKENDS[bname]
        arm = f"sdpa.{bname}" + (".det" if deterministic else "")
        for gmode in _gqa_modes(p.group):
            try:
                fn = _train_fn(p, be, gmode, mode, deterministic)
            except Exception as e:
                fn = _raiser(e)
            cfg = {"gqa": gmode}
            if p.varlen:
                cfg["layout"] = "loop"
            cands.append(Candidate(arm=arm, config=cfg, fn=fn, deterministic=deterministic))
    return cands


def _raiser(e):
    def f():
        raise e
    return f


def _train_fn(p: TrainProblem, be, gmode: str, mode: str, deterministic: bool):
    G = p.group
    q, k, v = fresh_leaves(p.q, p.k, p.v)

    def fwd():
        kk, vv = (k, v)
        if gmode == "expand":
            kk = k.repeat_interleave(G, dim=-2)
            vv = v.repeat_interleave(G, dim=-2)
        gqa = gmode == "enable_gqa"
        if not p.varlen:
            o = _sdpa(be, q.transpose(1, 2), kk.transpose(1, 2), vv.transpose(1, 2), p.causal, gqa)
            return o.transpose(1, 2)
        outs, start = [], 0
        for s in p.seqlens:
            sl = slice(start, start + s)
            o = _sdpa(be, q[sl].transpose(0, 1).unsqueeze(0), kk[sl].transpose(0, 1).unsqueeze(0),
                      vv[sl].transpose(0, 1).unsqueeze(0), p.causal, gqa)
            outs.append(o.squeeze(0).transpose(0, 1))
            start += s
        return torch.cat(outs, 0)

    if mode == "fwd":
        return wrap_deterministic(fwd) if deterministic else (lambda: fwd())
    if deterministic:
        with deterministic_mode():
            out = fwd()
        return wrap_deterministic(grad_fn(out, (q, k, v), p.dout))
    out = fwd()
    return grad_fn(out, (q, k, v), p.dout)


def decode_candidates(p: DecodeProblem, backends=None) -> List[Candidate]:
    if not BACKENDS:
        raise Unavailable("torch.nn.attention.sdpa_kernel missing")
    B, H, D, Hkv, G = p.batch, p.heads, p.head_dim, p.kv_heads, p.group
    cands = []
    for bname in backends or default_backends():
        be = BACKENDS[bname]
        modes = ["mha"] if G == 1 else ["enable_gqa", "pack"]
        for gmode in modes:
            if gmode == "pack":
                qv = p.q.view(B, Hkv, G, D)

                def fn(be=be, qv=qv):
                    return _sdpa(be, qv, p.k, p.v, False, False, p.softmax_scale).view(B, H, D)
            else:
                qv = p.q.view(B, H, 1, D)

                def fn(be=be, qv=qv, g=(gmode == "enable_gqa")):
                    return _sdpa(be, qv, p.k, p.v, False, g, p.softmax_scale).view(B, H, D)
            cands.append(Candidate(arm=f"sdpa.{bname}", config={"gqa": gmode}, fn=fn,
                                   meta={"bytes_per_key": 4 * D}))
    return cands
