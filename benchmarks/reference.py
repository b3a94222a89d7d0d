"""FP32 references, computed once per case (float64 on CPU)."""
from __future__ import annotations

import math
from typing import Optional

import torch


def decode_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: Optional[float] = None,
                     chunk_bytes: int = 2**30) -> torch.Tensor:
    """Exact one-token attention. q (B, H, D); k, v (B, H_kv, L, D) -> (B, H, D) fp32
    (fp64 on CPU). Head h reads KV head h // G (torch's enable_gqa convention)."""
    B, H, D = q.shape
    Hkv, L = k.shape[1], k.shape[2]
    G = H // Hkv
    dt = torch.float64 if q.device.type == "cpu" else torch.float32
    scale = scale if scale is not None else 1.0 / math.sqrt(D)
    per_row = Hkv * L * D * 4 * 2
    step = max(1, chunk_bytes // max(per_row, 1))
    outs = []
    for b0 in range(0, B, step):
        b1 = min(B, b0 + step)
        qf = q[b0:b1].to(dt).view(b1 - b0, Hkv, G, D)
        kf = k[b0:b1].to(dt)
        vf = v[b0:b1].to(dt)
        s = torch.matmul(qf, kf.transpose(-1, -2)) * scale
        p = torch.softmax(s, dim=-1)
        outs.append(torch.matmul(p, vf).reshape(b1 - b0, H, D))
    return torch.cat(outs, 0)


def causal_mask_attention(q, k, v, causal: bool = True, scale: Optional[float] = None):
    """Exact attention on (S, H, D) q and (S, H_kv, D) k/v of one sequence (small sizes:
    used by tests and the generate suite's per-step references)."""
    S, H, D = q.shape
    Hkv = k.shape[1]
    G = H // Hkv
    dt = torch.float64 if q.device.type == "cpu" else torch.float32
    scale = scale if scale is not None else 1.0 / math.sqrt(D)
    qf = q.to(dt).transpose(0, 1)
    kf = k.to(dt).repeat_interleave(G, dim=1).transpose(0, 1)
    vf = v.to(dt).repeat_interleave(G, dim=1).transpose(0, 1)
    s = torch.matmul(qf, kf.transpose(-1, -2)) * scale
    if causal:
        Sk = k.shape[0]
        m = torch.ones(S, Sk, dtype=torch.bool, device=q.device).tril(Sk - S)
        s = s.masked_fill(~m, float("-inf"))
    return torch.matmul(torch.softmax(s, -1), vf).transpose(0, 1)
