"""FoldKVCache.fork: a new request sharing a request's filled pages (a shared prompt, parallel
samples, beam search). CPU reference; the GPU file repeats the first test on CUDA.

- Each request's later outputs are the bits of a request built from its own tokens alone.
- A fork takes at most one page (a copy of a partly filled last page); shared pages go back to
  the pool only when the last request holding them lets go.
- v8 caches fork only with a fixed v_scale; a fork the pool cannot serve changes nothing.
"""

from __future__ import annotations

import pytest
import torch

import fold_attention as fa
from decode_helpers import bits16, synth

PAGE = 64


def _play(kw, prompt, forks, steps, device="cpu"):
    """A cache whose request 0 holds k[0, :prompt]; forks of it (fork 0 of request 0, fork j of
    fork j - 1) are stepped with their own tokens; returns each step's outputs per request, the
    cache and the reference: a cache where every request was written from its own tokens."""
    B, Hkv, G, D = forks + 1, 2, 4, 64
    q, k, v = synth(B, Hkv, G, D, prompt + steps, seed=61)
    g = torch.Generator().manual_seed(62)
    ks = torch.randn(B, steps, Hkv, D, generator=g).bfloat16()
    vs = torch.randn(B, steps, Hkv, D, generator=g).clamp(-3, 3).bfloat16()
    cache = fa.FoldKVCache(B, Hkv * G, Hkv, D, prompt + steps, page_size=PAGE, device=device, **kw)
    ref = fa.FoldKVCache(B, Hkv * G, Hkv, D, prompt + steps, page_size=PAGE, device=device, **kw)
    cache.add_request()
    cache.extend(0, k[0, :prompt].to(device), v[0, :prompt].to(device))
    for j in range(forks):
        assert cache.fork(j) == j + 1
    for b in range(B):
        ref.add_request()
        ref.extend(b, k[0, :prompt].to(device), v[0, :prompt].to(device))
    outs = []
    for i in range(steps):
        qi = torch.randn(B, Hkv * G, D, generator=g).bfloat16().to(device)
        got = fa.fold_attn_with_kvcache(qi, cache, ks[:, i].to(device), vs[:, i].to(device), return_lse=True)
        want = fa.fold_attn_with_kvcache(qi, ref, ks[:, i].to(device), vs[:, i].to(device), return_lse=True)
        outs.append((got, want))
    return outs, cache, ref


@pytest.mark.parametrize("kw", [dict(depth=16.0), dict(depth=None), dict(depth=12.0, v8=True, v_scale=1.0),
                                dict(depth=16.0, window_size=(99, 0))],
                         ids=["depth16", "dense", "v8_fixed", "pinned"])
@pytest.mark.parametrize("prompt", [200, 192])  # a partly filled last page, or none
def test_forks_continue_as_requests_of_their_own_tokens(kw, prompt):
    outs, cache, ref = _play(kw, prompt, forks=2, steps=80)
    for i, ((o, lse), (ro, rlse)) in enumerate(outs):
        assert torch.equal(bits16(o), bits16(ro)) and torch.equal(bits16(lse), bits16(rlse)), i
    assert torch.equal(cache.heavy_keys, ref.heavy_keys)


def test_a_fork_takes_one_page_and_shared_pages_outlive_their_first_holder():
    cache = fa.FoldKVCache(3, 8, 2, 64, 1000, page_size=PAGE, num_pages=12)
    k = torch.randn(500, 2, 64).bfloat16()
    cache.extend(cache.add_request(), k[:200], k[:200])  # 4 pages, the last one partly filled
    assert cache.free_pages == 8
    a = cache.fork(0)
    assert cache.free_pages == 7  # the partial page's copy
    b = cache.fork(a)
    assert cache.free_pages == 6
    shared = cache.page_table[0, :3].tolist()
    assert cache.page_table[a, :3].tolist() == shared == cache.page_table[b, :3].tolist()
    assert len({cache.page_table[r, 3].item() for r in (0, a, b)}) == 3
    cache.release(0)
    assert cache.free_pages == 7  # only request 0's own last page
    q = torch.randn(3, 8, 64).bfloat16()
    before = fa.fold_attn_with_kvcache(q, cache)
    cache.extend(cache.add_request(), k[:300], k[:300])  # may reuse request 0's page only
    assert torch.equal(bits16(fa.fold_attn_with_kvcache(q, cache)[a]), bits16(before[a]))
    cache.release(a)
    assert cache.free_pages == 12 - 5 - 4  # the new request's 5, b's 3 shared + 1
    cache.release(b)
    assert cache.free_pages == 12 - 5


def test_fork_refusals_change_nothing():
    k = torch.randn(200, 2, 64).bfloat16()
    v8 = fa.FoldKVCache(2, 8, 2, 64, 512, v8=True, page_size=PAGE)
    v8.extend(v8.add_request(), k, k)
    with pytest.raises(ValueError, match="v_scale"):
        v8.fork(0)
    full = fa.FoldKVCache(2, 8, 2, 64, 512, page_size=PAGE, num_pages=5)
    full.extend(full.add_request(), k, k)  # 4 pages
    full.add_request(length=64)  # the 5th
    with pytest.raises(ValueError, match="slots is in use"):
        full.fork(0)
    full.release(1)
    full.add_request(length=0)
    full.release(1)
    pool = fa.FoldKVCache(2, 8, 2, 64, 512, page_size=PAGE, num_pages=4)
    pool.extend(pool.add_request(), k, k)  # 4 pages: none free for the partial page's copy
    before = (pool.page_table.clone(), pool.lengths.clone(), pool.free_pages)
    with pytest.raises(fa.PagePoolExhausted, match="fork of request 0"):
        pool.fork(0)
    assert torch.equal(pool.page_table, before[0]) and torch.equal(pool.lengths, before[1])
    assert pool.free_pages == before[2]
    with pytest.raises(ValueError, match="request 1 is not active"):
        pool.fork(1)
    empty = fa.FoldKVCache(2, 8, 2, 64, 512, page_size=PAGE)
    assert empty.fork(empty.add_request()) == 1 and empty.length(1) == 0


def test_pinned_forks_count_shared_pages_as_held():
    """A pinned request and its fork forget the same shared pages: the pool gets one page back,
    not two. Appends sized by that rule are refused before anything is written."""
    g = torch.Generator().manual_seed(63)
    r = lambda *shape: torch.randn(*shape, generator=g).bfloat16()  # noqa: E731
    for op in ("extend", "tokens"):
        c = fa.FoldKVCache(2, 8, 2, 64, 1024, page_size=PAGE, window_size=(99, 0), num_pages=4)
        c.extend(c.add_request(), r(128, 2, 64), r(128, 2, 64))
        c.fork(0)
        assert c.free_pages == 2
        before = (c.lengths.tolist(), c.free_pages, [list(x) for x in c._pages_host], dict(c._shared))
        assert c.pages_needed(0, 256) == 4
        with pytest.raises(fa.PagePoolExhausted):
            if op == "extend":
                c.extend(0, r(256, 2, 64), r(256, 2, 64))
            else:
                fa.fold_attn_with_kvcache(r(2, 70, 8, 64), c, r(2, 70, 2, 64), r(2, 70, 2, 64))
        assert (c.lengths.tolist(), c.free_pages, [list(x) for x in c._pages_host], dict(c._shared)) == before
