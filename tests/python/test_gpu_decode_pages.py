"""GPU: the decode at page sizes other than 128 (64, 256, 512 tokens per page).

The page size is a cache parameter (a multiple of 64): it moves where a request's keys lie in
the pool and which keys a cut page's mean value row covers (the screen's mass correction), but
not the order of any sum of the dense path (its splits and 64-key chunks start at multiples of
64 tokens, so a chunk never spans two pages). So:
- at every page size the CUDA cache holds the CPU's bits and a step matches the CPU reference
  (bit for bit, or within one rounding on the tensor-core path), statistics included;
- with depth None the output and LSE bits do not depend on the page size (CPU and GPU).
Skipped without a CUDA device or a CUDA build (the CPU half of the second test runs anywhere).
"""

from __future__ import annotations


import pytest
import torch

import fold_attention as fa

# The CPU / CUDA comparisons of the main decode GPU tests (the same contract: bit for bit, or
# within one output rounding and 1e-5 in the LSE on the tensor-core path).
from decode_helpers import (
    assert_matches_cpu,
    assert_same_cache,
    bits16,
    fill_requests,
    step_outputs,
    synth,
    tensor_core_path,
)
from helpers import gpu_ready

_READY, _WHY = gpu_ready()
CUDA = torch.device("cuda")
TIME_LIMIT_S = 60

# Empty, 1, a free slot, partial chunks and splits; 255, 511 and 2047 keys cross a page boundary
# of every tested size (256 / 512 / 2048 tokens) on the first or second appending step.
RAGGED = [0, 1, 63, None, 511, 1300, 255, 2047]


@pytest.mark.gpu
@pytest.mark.skipif(not _READY, reason=_WHY)
@pytest.mark.parametrize("page", [64, 256, 512])
@pytest.mark.parametrize(
    "dtype,D,Hkv,G,depth,v8",
    [
        (torch.bfloat16, 128, 2, 4, None, False),  # the dense ring
        (torch.bfloat16, 128, 2, 4, 16.0, False),  # the screened split (cut pages' means)
        (torch.float16, 64, 3, 3, 16.0, False),  # the real model's group and head dim
        (torch.bfloat16, 128, 1, 16, 16.0, False),  # the planner's dense choice at G 16
        (torch.bfloat16, 64, 2, 4, 12.0, True),  # v8's screened split2 (the fma split with its knob)
    ],
    ids=lambda x: str(x).replace("torch.", ""),
)
def test_page_size_matches_cpu(page, dtype, D, Hkv, G, depth, v8):
    B = len(RAGGED)
    q, k, v = synth(B, Hkv, G, D, 2100, seed=5, dtype=dtype)
    kw = dict(depth=depth, v8=v8, page_size=page, dtype=dtype)
    cpu = fa.FoldKVCache(B, Hkv * G, Hkv, D, 2100, device="cpu", **kw)
    gpu = fa.FoldKVCache(B, Hkv * G, Hkv, D, 2100, device=CUDA, **kw)
    fill_requests((cpu, gpu), k, v, RAGGED, chunks=2)
    assert_same_cache(cpu, gpu)
    exact = not tensor_core_path(v8, D, depth, G)
    for i in range(3):  # an attend, then two steps that append (new pages opened: see RAGGED)
        ks = vs = None
        if i:
            ks, vs = torch.randn(B, Hkv, D).to(dtype), torch.randn(B, Hkv, D).to(dtype)
        oc, lc, sc = step_outputs(cpu, q, ks, vs)
        og, lg, sg = step_outputs(gpu, q, ks, vs)
        assert_matches_cpu(oc, og, lc, lg, exact)
        assert sc == sg, (sc, sg)
    assert_same_cache(cpu, gpu)


_DEVICES = ["cpu", pytest.param(CUDA, marks=[pytest.mark.gpu, pytest.mark.skipif(not _READY, reason=_WHY)])]


@pytest.mark.parametrize("device", _DEVICES, ids=str)
@pytest.mark.parametrize("D,Hkv,G", [(128, 2, 4), (64, 3, 3), (128, 1, 16)])
def test_dense_bits_do_not_depend_on_page_size(device, D, Hkv, G):
    B = len(RAGGED)
    q, k, v = synth(B, Hkv, G, D, 2100, seed=9, dtype=torch.bfloat16)
    results = []
    for page in (64, 128, 256, 512):
        c = fa.FoldKVCache(B, Hkv * G, Hkv, D, 2100, depth=None, page_size=page, device=device)
        fill_requests((c,), k, v, RAGGED, chunks=2)
        results.append((page, *step_outputs(c, q)))
    _, o0, l0, s0 = results[0]
    for page, o, lse, s in results[1:]:
        assert torch.equal(bits16(o0), bits16(o)), page
        assert torch.equal(bits16(l0), bits16(lse)), page
        assert s0 == s, (page, s0, s)
