"""FlashInfer (optional: `flashinfer-python`, JIT-compiles with the machine's nvcc).

Decode through BatchDecodeWithPagedKVCacheWrapper (NHD layout), tuned over page
size and the tensor-core decode path. The plan runs once on the host; the run is
graph-captured like every other arm.
"""
from __future__ import annotations

from typing import List

import torch

from ..harness import Candidate, Unavailable
from .problems import DecodeProblem


def _import():
    try:
        import flashinfer  # noqa: F401
        return flashinfer
    except Exception as e:
        raise Unavailable(f"import flashinfer failed: {type(e).__name__}: {e}")


def decode_candidates(p: DecodeProblem, page_sizes=(16, 64), tensor_cores=(False, True),
                      split_modes=(False, True)) -> List[Candidate]:
    """Tuned over page size, the tensor-core decode path (each a separate JIT module:
    the first use of each costs a compile on the machine) and split-KV on/off."""
    fi = _import()
    B, H, Hkv, L, D = p.batch, p.heads, p.kv_heads, p.context, p.head_dim
    dev = p.q.device
    cands = []
    for ps in page_sizes:
        if L % ps:
            continue
        npp = L // ps
        # (B, Hkv, L, D) -> pages (B*npp, ps, Hkv, D), request b owns pages b*npp ...
        kc = p.k.transpose(1, 2).reshape(B * npp, ps, Hkv, D).contiguous()
        vc = p.v.transpose(1, 2).reshape(B * npp, ps, Hkv, D).contiguous()
        indptr = torch.arange(0, B + 1, dtype=torch.int32, device=dev) * npp
        indices = torch.arange(0, B * npp, dtype=torch.int32, device=dev)
        last = torch.full((B,), ps, dtype=torch.int32, device=dev)
        for tc in tensor_cores:
            for no_split in split_modes:
                ws = torch.empty(256 * 2**20, dtype=torch.uint8, device=dev)
                try:
                    w = fi.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=tc)
                    w.plan(indptr, indices, last, H, Hkv, D, ps, q_data_type=p.q.dtype,
                           kv_data_type=p.k.dtype, sm_scale=p.softmax_scale, disable_split_kv=no_split)
                    fn = (lambda w=w, kc=kc, vc=vc: w.run(p.q, (kc, vc)))
                except Exception as e:
                    def fn(e=e):
                        raise e
                cands.append(Candidate(arm="flashinfer", config={"page_size": ps, "tensor_cores": tc,
                                                                 "split_kv": not no_split}, fn=fn,
                                       meta={"bytes_per_key": 4 * D}))
    return cands
