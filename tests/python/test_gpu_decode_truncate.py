"""GPU: FoldKVCache.truncate on CUDA caches: a cut request holds the state and gives the step bits
of a request that only received the kept tokens (cuts inside a page, on a boundary, of tokens in
the heavy list), a speculative round, and a cut into a page shared with a fork. Skipped without a
CUDA device or a CUDA build."""

from __future__ import annotations

import pytest
import torch

import fold_attention as fa
from decode_helpers import bits16
from helpers import gpu_ready
from test_decode_truncate import D, H, Hk, _assert_same_state, _data, _state

_READY, _WHY = gpu_ready()
CUDA = torch.device("cuda")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _READY, reason=_WHY)]


def _cache(**kw):
    kw.setdefault("page_size", 64)
    kw.setdefault("depth", 16.0)
    return fa.FoldKVCache(3, H, Hk, D, 600, device=CUDA, **kw)


def _steps_equal(a, b, seed, k=None, v=None, n=1):
    g = torch.Generator().manual_seed(seed)
    for i in range(n):
        q = torch.randn(3, H, D, generator=g).bfloat16().to(CUDA)
        ks = None if k is None else k[i].unsqueeze(0).expand(3, Hk, D).contiguous().to(CUDA)
        vs = None if v is None else v[i].unsqueeze(0).expand(3, Hk, D).contiguous().to(CUDA)
        oa, la = fa.fold_attn_with_kvcache(q, a, ks, vs, return_lse=True)
        ob, lb = fa.fold_attn_with_kvcache(q, b, ks, vs, return_lse=True)
        assert torch.equal(bits16(oa), bits16(ob)) and torch.equal(bits16(la), bits16(lb)), i


@pytest.mark.parametrize("depth", [16.0, None], ids=["depth16", "dense"])
@pytest.mark.parametrize("L,n,heavy_at", [(300, 250, ()), (300, 256, ()), (300, 201, (205, 260, 299))],
                         ids=["in-page", "boundary", "heavy-cut"])
def test_cut_on_cuda(depth, L, n, heavy_at):
    k, v = _data(L + 20, seed=L + n, heavy_at=heavy_at)
    cut, fresh = _cache(depth=depth), _cache(depth=depth)
    for c, upto in ((cut, L), (fresh, n)):
        c.add_request()
        c.extend(0, k[:upto].to(CUDA), v[:upto].to(CUDA))
    cut.truncate(0, n)
    _assert_same_state(_state(cut, 0), _state(fresh, 0))
    _steps_equal(cut, fresh, seed=3)
    _steps_equal(cut, fresh, seed=4, k=k[L:], v=v[L:], n=20)
    _assert_same_state(_state(cut, 0), _state(fresh, 0))


def test_speculative_round_on_cuda():
    k, v = _data(400, seed=7, heavy_at=(301,))
    spec, plain = _cache(), _cache()
    for c in (spec, plain):
        for b in range(3):
            c.add_request()
            c.extend(b, k[:300 - 10 * b].to(CUDA), v[:300 - 10 * b].to(CUDA))
    lengths = spec.lengths.tolist()
    n = 4
    g = torch.Generator().manual_seed(8)
    qd = torch.randn(3, n, H, D, generator=g).bfloat16()
    kd = torch.stack([k[L:L + n] for L in lengths])
    vd = torch.stack([v[L:L + n] for L in lengths])
    fa.fold_attn_with_kvcache(qd.to(CUDA), spec, kd.to(CUDA), vd.to(CUDA))
    for b, a in enumerate((0, 2, 4)):
        spec.truncate(b, lengths[b] + a)
        if a:
            plain.extend(b, kd[b, :a].to(CUDA), vd[b, :a].to(CUDA))
    for b in range(3):
        _assert_same_state(_state(spec, b), _state(plain, b))
    _steps_equal(spec, plain, seed=9, k=k[350:], v=v[350:], n=5)


def test_cut_into_a_shared_page_on_cuda():
    k, v = _data(400, seed=11, heavy_at=(150,))
    cache = _cache(num_pages=12)
    cache.add_request()
    cache.extend(0, k[:200].to(CUDA), v[:200].to(CUDA))
    q = torch.randn(3, H, D).bfloat16().to(CUDA)
    parent = fa.fold_attn_with_kvcache(q, cache, return_lse=True)
    child = cache.fork(0)
    cache.truncate(child, 100)
    cache.extend(child, k[300:380].to(CUDA), v[300:380].to(CUDA))
    fresh = _cache()
    fresh.add_request()
    fresh.add_request()
    fresh.extend(1, torch.cat([k[:100], k[300:380]]).to(CUDA), torch.cat([v[:100], v[300:380]]).to(CUDA))
    _assert_same_state(_state(cache, child), _state(fresh, 1))
    out = fa.fold_attn_with_kvcache(q, cache, return_lse=True)
    ref = fa.fold_attn_with_kvcache(q, fresh, return_lse=True)
    assert torch.equal(bits16(out[0][0]), bits16(parent[0][0]))
    assert torch.equal(bits16(out[0][child]), bits16(ref[0][1]))
