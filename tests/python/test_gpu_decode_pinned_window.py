"""GPU: FoldKVCache(window_size=...), a cache pinned to one sliding window, on CUDA.

The CUDA writers forget a request's keys before kept(L) as the CPU's do (the heavy list per
token, a v8 re-scale from kept(L)), so with pages returned to the pool and reused:
- a CUDA pinned cache holds the CPU pinned cache's bits after every call (prefill in chunks,
  extends, steps, a v8 re-scale) and its steps match the CPU reference (bit for bit, or within
  one rounding on the tensor-core path), statistics included;
- a step captured in a CUDA graph on a pinned cache (pages reserved up front, none returned)
  replays with the bits of eager steps that return pages.
Skipped without a CUDA device or a CUDA build.
"""

from __future__ import annotations


import pytest
import torch

import fold_attention as fa
from decode_helpers import (assert_graph_replays, assert_matches_cpu, assert_same_cache, step_outputs, synth,
                            tensor_core_path)
from helpers import gpu_ready

_READY, _WHY = gpu_ready()
CUDA = torch.device("cuda")
TIME_LIMIT_S = 60
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _READY, reason=_WHY)]


@pytest.mark.parametrize(
    "dtype,D,Hkv,G,depth,v8,left",
    [
        (torch.bfloat16, 64, 8, 8, None, False, 127),  # gpt-oss's sliding layers (dense)
        (torch.bfloat16, 64, 8, 8, 16.0, False, 127),
        (torch.float16, 64, 3, 3, 16.0, False, 300),
        (torch.bfloat16, 128, 2, 4, 16.0, True, 600),  # v8, its scale growing late
        (torch.bfloat16, 64, 2, 4, 12.0, True, 127),
    ],
    ids=lambda x: str(x).replace("torch.", ""),
)
def test_pinned_cache_matches_cpu(dtype, D, Hkv, G, depth, v8, left):
    B, H = 3, Hkv * G
    q, k, v = synth(B, Hkv, G, D, 1400, seed=41, dtype=dtype)
    v[:, 1040] *= 24.0  # (step 90) v8: the exponent grows, re-scaling the kept keys only
    kw = dict(depth=depth, v8=v8, page_size=64, dtype=dtype, window_size=(left, 0), num_pages=40)
    cpu = fa.FoldKVCache(B, H, Hkv, D, 1400, device="cpu", **kw)
    gpu = fa.FoldKVCache(B, H, Hkv, D, 1400, device=CUDA, **kw)
    lengths = (700, 1, 950)
    cu = torch.tensor([0, 700, 701, 1651], dtype=torch.int32)
    rows = lambda x: torch.cat([x[0, :700], x[1, :1], x[2, :950]])  # noqa: E731
    qp = torch.randn(1651, H, D).to(dtype)
    for c in (cpu, gpu):
        c.prefill(qp.to(c.device), rows(k).to(c.device), rows(v).to(c.device), cu)
    assert_same_cache(cpu, gpu)
    exps = gpu.v_exp.cpu().clone()
    assert cpu.free_pages == gpu.free_pages > 40 - sum(-(-n // 64) for n in lengths)  # returned
    exact = not tensor_core_path(v8, D, depth, G)
    g = torch.Generator().manual_seed(3)
    for i in range(120):
        t = 950 + i
        qs = torch.randn(B, H, D, generator=g).to(dtype)
        oc, lc, sc = step_outputs(cpu, qs, k[:, t], v[:, t])
        og, lg, sg = step_outputs(gpu, qs, k[:, t], v[:, t])
        assert_matches_cpu(oc, og, lc, lg, exact)
        assert sc == sg, (i, sc, sg)
        if i == 60:
            for c in (cpu, gpu):
                c.extend(0, k[0, 1200:1330].to(c.device), v[0, 1200:1330].to(c.device))
    assert_same_cache(cpu, gpu)
    assert cpu.page_table.tolist() == gpu.page_table.tolist()
    if v8:
        assert (gpu.v_exp.cpu() > exps).all()  # every request's scale grew at step 90


def test_graph_replay_on_a_pinned_cache():
    """Eager steps return pages; the captured step (pages reserved up front) returns none: the
    same bits, since the writers' rule depends on the lengths only."""
    B, Hkv, G, D, steps, left = 3, 8, 8, 64, 140, 127
    q, k, v = synth(B, Hkv, G, D, 700, seed=43)
    caches = []
    for _ in range(2):
        c = fa.FoldKVCache(B, Hkv * G, Hkv, D, 800, depth=16.0, page_size=64, device=CUDA,
                           window_size=(left, 0))
        for b, n in enumerate((500, 1, 321)):
            assert c.add_request(length=n + steps) == b
            c.extend(b, k[b, :n].to(CUDA), v[b, :n].to(CUDA))
        caches.append(c)
    eager, graphed = caches
    g = torch.Generator().manual_seed(4)
    qs = [torch.randn(B, Hkv * G, D, generator=g).bfloat16().to(CUDA) for _ in range(steps)]
    ks = [torch.randn(B, Hkv, D, generator=g).bfloat16().to(CUDA) for _ in range(steps)]
    vs = [torch.randn(B, Hkv, D, generator=g).bfloat16().to(CUDA) for _ in range(steps)]
    def step(cache, q, k, v):
        return fa.fold_attn_with_kvcache(q, cache, k, v, return_lse=True)

    expected = [step(eager, qs[i], ks[i], vs[i]) for i in range(steps)]
    assert_graph_replays(graphed, step, qs, ks, vs, expected)
    assert torch.equal(eager.heavy_keys, graphed.heavy_keys)
    assert eager.free_pages > graphed.free_pages
    assert graphed.stats()["rejected_appends"] == 0
