"""GPU: FoldKVCache(num_pages=...), slots sharing a pool smaller than every slot at max_len.

The kernels read a request's pages through its page table and check each page against
num_pages, so a small pool changes which pages hold a request's keys, never a sum's order:
- a CUDA cache on a small pool (pages handed out, released and handed out again in another
  order) gives the bits of a CUDA cache on the full pool, its buffers hold the CPU small pool's
  bits, and its steps match the CPU reference (bit for bit, or within one rounding on the
  tensor-core path), statistics included;
- a step captured in a CUDA graph on a small pool (pages reserved up front) replays with the
  eager bits.
Skipped without a CUDA device or a CUDA build.
"""

from __future__ import annotations


import pytest
import torch

import fold_attention as fa
from decode_helpers import (
    POOL_SCRIPT,
    assert_matches_cpu,
    assert_graph_replays,
    assert_same_cache,
    bits16,
    play_pool_script,
    synth,
    tensor_core_path,
)
from helpers import gpu_ready

_READY, _WHY = gpu_ready()
CUDA = torch.device("cuda")
TIME_LIMIT_S = 60
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _READY, reason=_WHY)]


@pytest.mark.parametrize(
    "dtype,D,Hkv,G,depth,v8",
    [
        (torch.bfloat16, 128, 2, 4, None, False),  # the dense ring
        (torch.bfloat16, 128, 2, 4, 16.0, False),  # the screened split (cut pages' means)
        (torch.float16, 64, 3, 3, 16.0, False),  # the real model's group and head dim
        (torch.bfloat16, 128, 1, 16, 16.0, False),  # the planner's dense choice at G 16
        (torch.bfloat16, 64, 2, 4, 12.0, True),  # v8
    ],
    ids=lambda x: str(x).replace("torch.", ""),
)
def test_small_pool_matches_full_pool_and_cpu(dtype, D, Hkv, G, depth, v8):
    B = 4
    q, k, v = synth(B, Hkv, G, D, 260, seed=21, dtype=dtype)
    kw = dict(depth=depth, v8=v8, page_size=64, dtype=dtype)
    full = fa.FoldKVCache(B, Hkv * G, Hkv, D, 512, device=CUDA, **kw)
    for b in range(B):  # the full pool's free list reordered: its requests get other pages
        full.add_request(length=256)
    for b in range(B):
        full.release(b)
    small = fa.FoldKVCache(B, Hkv * G, Hkv, D, 512, device=CUDA, num_pages=15, **kw)
    cpu = fa.FoldKVCache(B, Hkv * G, Hkv, D, 512, device="cpu", num_pages=15, **kw)
    ref = play_pool_script(full, q, k, v, POOL_SCRIPT)
    got = play_pool_script(small, q, k, v, POOL_SCRIPT)
    want = play_pool_script(cpu, q, k, v, POOL_SCRIPT)
    assert small.free_pages == 0
    assert small.page_table.tolist() != full.page_table.tolist()
    exact = not tensor_core_path(v8, D, depth, G)
    for (of, lf, sf), (og, lg, sg), (oc, lc, sc) in zip(ref, got, want):
        assert torch.equal(bits16(of), bits16(og)) and torch.equal(bits16(lf), bits16(lg))
        assert sf == sg, (sf, sg)
        assert_matches_cpu(oc, og, lc, lg, exact)
        assert sc == sg, (sc, sg)
    assert_same_cache(cpu, small)


def test_graph_replay_on_a_small_pool():
    """Three requests reserve their steps' pages up front in a 30-page pool (the full pool
    would hold 3 x 13); a captured fold_attn_with_kvcache replays with the eager bits."""
    B, Hkv, G, D, steps = 3, 2, 4, 64, 4
    lengths = [500, 1, 321]
    q, k, v = synth(B, Hkv, G, D, 700, seed=23)
    caches = []
    for num_pages in (None, 30):
        c = fa.FoldKVCache(B, Hkv * G, Hkv, D, 800, depth=16.0, page_size=64, device=CUDA,
                           num_pages=num_pages)
        for b, n in enumerate(lengths):
            assert c.add_request(length=n + steps) == b
            c.extend(b, k[b, :n].to(CUDA), v[b, :n].to(CUDA))
        caches.append(c)
    eager, graphed = caches
    assert graphed.free_pages == 30 - (8 + 1 + 6)
    qs = [torch.randn(B, Hkv * G, D).bfloat16().to(CUDA) for _ in range(steps)]
    ks = [torch.randn(B, Hkv, D).bfloat16().to(CUDA) for _ in range(steps)]
    vs = [torch.randn(B, Hkv, D).bfloat16().to(CUDA) for _ in range(steps)]
    def step(cache, q, k, v):
        return fa.fold_attn_with_kvcache(q, cache, k, v, return_lse=True)

    expected = [step(eager, qs[i], ks[i], vs[i]) for i in range(steps)]
    assert_graph_replays(graphed, step, qs, ks, vs, expected)
    assert graphed.lengths.tolist() == [n + steps for n in lengths]
    assert graphed.stats()["rejected_appends"] == 0
