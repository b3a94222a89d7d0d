"""GPU: fold_attn_with_kvcache with n > 1 new tokens per request on a CUDA cache: the bits of n
single-token steps, and the CPU reference's outputs (bit for bit, or within one rounding on the
tensor-core path). Skipped without a CUDA device or a CUDA build."""

from __future__ import annotations

import pytest
import torch

import fold_attention as fa
from decode_helpers import assert_matches_cpu, bits16, synth, tensor_core_path
from helpers import gpu_ready

_READY, _WHY = gpu_ready()
CUDA = torch.device("cuda")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _READY, reason=_WHY)]


@pytest.mark.parametrize("depth,v8", [(None, False), (16.0, False), (12.0, True)])
def test_tokens_on_cuda_match_single_steps_and_cpu(depth, v8):
    B, Hkv, G, D, n = 3, 2, 4, 64, 40
    q, k, v = synth(B, Hkv, G, D, 800, seed=55)
    g = torch.Generator().manual_seed(56)
    qs, ks, vs = (torch.randn(B, n, h, D, generator=g).bfloat16() for h in (Hkv * G, Hkv, Hkv))
    caches = []
    for dev in (CUDA, CUDA, "cpu"):
        c = fa.FoldKVCache(B, Hkv * G, Hkv, D, 800, depth=depth, v8=v8, page_size=64, device=dev)
        for b, L in enumerate((300, 1, 130)):
            c.add_request()
            c.extend(b, k[b, :L].to(dev), v[b, :L].to(dev))
        caches.append(c)
    singles, many, cpu = caches
    one = [fa.fold_attn_with_kvcache(qs[:, i].to(CUDA), singles, ks[:, i].to(CUDA), vs[:, i].to(CUDA),
                                     return_lse=True) for i in range(n)]
    out, lse = fa.fold_attn_with_kvcache(qs.to(CUDA), many, ks.to(CUDA), vs.to(CUDA), return_lse=True)
    ref, ref_lse = fa.fold_attn_with_kvcache(qs, cpu, ks, vs, return_lse=True)
    for i, (o, l1) in enumerate(one):
        assert torch.equal(bits16(out[:, i]), bits16(o)) and torch.equal(bits16(lse[:, i]), bits16(l1)), i
    exact = not tensor_core_path(v8, D, depth, G)
    for i in range(n):
        assert_matches_cpu(ref[:, i], out[:, i].cpu(), ref_lse[:, i], lse[:, i].cpu(), exact)
