"""FoldKVCache.truncate: a request cut back to its first n tokens (a speculative draft's rejected
tail) gives the bits of a request that only ever received those n tokens. CPU reference; the GPU
file repeats the flows on CUDA caches.

- Cuts inside a page, on a page boundary, to zero; cut tokens that entered the heavy-key list
  (tokens with large keys), dense and screened steps, later appends.
- A speculative round: n draft tokens appended and attended, the rejected ones cut.
- A fork's pages: a cut into a shared page gives the cut request a copy; its parent is untouched.
- Refusals (v8, pinned, a length beyond the request's, an exhausted pool) change nothing.
"""

from __future__ import annotations

import pytest
import torch

import fold_attention as fa
from decode_helpers import bits16

H, Hk, D = 8, 2, 64


def _data(T, seed, heavy_at=()):
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(T, Hk, D, generator=g)
    for t in heavy_at:  # keys whose scale beats every other: they enter the heavy list
        k[t] *= 40.0
    v = torch.randn(T, Hk, D, generator=g) + 1.5
    return k.bfloat16(), v.bfloat16()


def _cache(**kw):
    kw.setdefault("page_size", 64)
    kw.setdefault("depth", 16.0)
    return fa.FoldKVCache(3, H, Hk, D, 600, **kw)


def _state(cache, b):
    """Request b's readable state: its length, heavy list, and each kept key's rows and page sum."""
    L = int(cache.lengths[b])
    P = cache.page_size
    pages = cache.page_table[b, : -(-L // P)].tolist()
    rows = lambda t: torch.cat([t[p] for p in pages], 1)[:, :L] if pages else t[:0]  # noqa: E731
    sums = [cache.v_page_sum[p] for p in pages]
    return L, cache.heavy_keys[b].clone(), [rows(t) for t in (cache.k_a, cache.k_b, cache.k_scale, cache.v)], sums


def _assert_same_state(a, b):
    assert a[0] == b[0]
    assert torch.equal(a[1], b[1])
    for x, y in zip(a[2], b[2]):
        assert torch.equal(bits16(x) if x.dtype in (torch.bfloat16, torch.float16) else x,
                           bits16(y) if y.dtype in (torch.bfloat16, torch.float16) else y)
    assert len(a[3]) == len(b[3])
    for x, y in zip(a[3], b[3]):
        assert torch.equal(x.view(torch.int32), y.view(torch.int32))


def _steps_equal(a, b, seed, appends=0, k=None, v=None):
    """Steps on both caches (appending tokens of k / v when given) give the same bits."""
    g = torch.Generator().manual_seed(seed)
    for i in range(max(appends, 1)):
        q = torch.randn(3, H, D, generator=g).to(a.dtype)
        ks = None if k is None else k[i].unsqueeze(0).expand(3, Hk, D).contiguous()
        vs = None if v is None else v[i].unsqueeze(0).expand(3, Hk, D).contiguous()
        oa, la = fa.fold_attn_with_kvcache(q, a, ks, vs, return_lse=True)
        ob, lb = fa.fold_attn_with_kvcache(q, b, ks, vs, return_lse=True)
        assert torch.equal(bits16(oa), bits16(ob)), i
        assert torch.equal(bits16(la), bits16(lb)), i


@pytest.mark.parametrize("kw", [dict(), dict(depth=None), dict(dtype=torch.float16)],
                         ids=["depth16", "dense", "fp16"])
@pytest.mark.parametrize("L,n,heavy_at", [(300, 250, ()), (300, 256, ()), (300, 0, ()),
                                          (300, 201, (205, 260, 299)), (10, 3, (5,))],
                         ids=["in-page", "boundary", "empty", "heavy-cut", "short"])
def test_a_cut_request_is_one_that_never_had_the_tokens(kw, L, n, heavy_at):
    dtype = kw.get("dtype", torch.bfloat16)
    k, v = _data(L + 20, seed=L + n, heavy_at=heavy_at)
    k, v = k.to(dtype), v.to(dtype)
    other, _ = _data(100, seed=1)
    cut, fresh = _cache(**kw), _cache(**kw)
    for c, upto in ((cut, L), (fresh, n)):
        c.add_request()
        c.extend(0, other.to(dtype), other.to(dtype))  # a neighbour
        c.add_request()
        c.extend(1, k[:upto], v[:upto])
    if heavy_at:  # the cut tokens did enter the list
        assert bool((cut.heavy_keys[1] >= n).any())
    cut.truncate(1, n)
    _assert_same_state(_state(cut, 1), _state(fresh, 1))
    _assert_same_state(_state(cut, 0), _state(fresh, 0))
    # Steps, then steps that append the same new tokens to both.
    _steps_equal(cut, fresh, seed=3)
    _steps_equal(cut, fresh, seed=4, appends=20, k=k[L:], v=v[L:])
    _assert_same_state(_state(cut, 1), _state(fresh, 1))


def test_a_speculative_round():
    """Four draft tokens appended and attended for every request, 0 / 2 / 4 of them kept: the
    next steps are those of caches that only received the kept ones."""
    k, v = _data(400, seed=7, heavy_at=(301,))
    g = torch.Generator().manual_seed(8)
    spec, plain = _cache(), _cache()
    for c in (spec, plain):
        for b in range(3):
            c.add_request()
            c.extend(b, k[:300 - 10 * b], v[:300 - 10 * b])
    lengths = spec.lengths.tolist()
    n = 4
    qd = torch.randn(3, n, H, D, generator=g).bfloat16()
    kd = torch.stack([k[L:L + n] for L in lengths])
    vd = torch.stack([v[L:L + n] for L in lengths])
    fa.fold_attn_with_kvcache(qd, spec, kd, vd)
    kept = [0, 2, 4]
    for b, a in enumerate(kept):
        spec.truncate(b, lengths[b] + a)
        if a:
            plain.extend(b, kd[b, :a], vd[b, :a])
    assert spec.lengths.tolist() == plain.lengths.tolist()
    for b in range(3):
        _assert_same_state(_state(spec, b), _state(plain, b))
    _steps_equal(spec, plain, seed=9, appends=5, k=k[350:], v=v[350:])


def test_a_cut_into_a_shared_page_copies_it():
    k, v = _data(400, seed=11, heavy_at=(150,))
    cache = _cache(num_pages=12)
    cache.add_request()
    cache.extend(0, k[:200], v[:200])  # pages 0-2 full, page 3 partly
    q = torch.randn(3, H, D).bfloat16()
    parent = fa.fold_attn_with_kvcache(q, cache, return_lse=True)
    child = cache.fork(0)
    free = cache.free_pages
    # Inside logical page 1, shared with the parent: copied; page 2, shared, let go; the child's
    # own copy of page 3 moves down to logical page 2.
    own = cache.page_table[child, 3].item()
    cache.truncate(child, 100)
    assert cache.free_pages == free - 1
    assert cache.page_table[child, 2].item() == own and cache.page_table[child, 3].item() == -1
    shared = set(cache.page_table[0, :4].tolist()) & set(cache.page_table[child, :4].tolist())
    assert shared == {cache.page_table[0, 0].item()}  # only the page before the cut is shared
    fresh = _cache()
    fresh.add_request()
    fresh.add_request()
    fresh.extend(1, k[:100], v[:100])
    _assert_same_state(_state(cache, child), _state(fresh, 1))
    cache.extend(child, k[300:380], v[300:380])  # writes the copies, not the parent's pages
    fresh.extend(1, k[300:380], v[300:380])
    _assert_same_state(_state(cache, child), _state(fresh, 1))
    out = fa.fold_attn_with_kvcache(q, cache, return_lse=True)
    assert torch.equal(bits16(out[0][0]), bits16(parent[0][0]))
    assert torch.equal(bits16(out[1][0]), bits16(parent[1][0]))
    ref = fa.fold_attn_with_kvcache(q, fresh, return_lse=True)
    assert torch.equal(bits16(out[0][child]), bits16(ref[0][1]))
    cache.release(child)
    cache.release(0)
    assert cache.free_pages == 12


def test_refusals_change_nothing():
    k, v = _data(200, seed=13)
    with pytest.raises(ValueError, match="v8 cache cannot be truncated"):
        c = _cache(v8=True)
        c.add_request()
        c.extend(0, k[:100], v[:100])
        c.truncate(0, 50)
    with pytest.raises(ValueError, match="pinned to a window cannot be truncated"):
        c = _cache(window_size=(63, 0))
        c.add_request()
        c.extend(0, k[:100], v[:100])
        c.truncate(0, 50)
    c = _cache(v8=True)  # (a cut to the request's own length changes nothing: accepted)
    c.add_request()
    c.extend(0, k[:100], v[:100])
    c.truncate(0, 100)
    c = _cache(num_pages=3)
    c.add_request()
    c.extend(0, k[:192], v[:192])  # three full pages: the pool is full
    with pytest.raises(ValueError, match="length"):
        c.truncate(0, 193)
    with pytest.raises(ValueError, match="not active"):
        c.truncate(1, 0)
    child = c.fork(0)  # shares all three pages
    before = _state(c, child), c.page_table.clone(), dict(c._shared)
    with pytest.raises(fa.PagePoolExhausted, match="truncating request 1"):
        c.truncate(child, 10)  # page 0, shared, would need a copy
    _assert_same_state(_state(c, child), before[0])
    assert torch.equal(c.page_table, before[1]) and c._shared == before[2]
    c.truncate(child, 128)  # on a page boundary: pages 2 let go, nothing copied
    assert c.free_pages == 0 and c._reserved[child] == 2
    c.release(0)
    assert c.free_pages == 1  # page 2 was the parent's alone by then
    c.release(child)
    assert c.free_pages == 3
