"""FoldKVCache(window_size=...): a cache pinned to one sliding window returns each request's
pages before its window to the pool (CPU reference; the C++ tests check the writers' rule).

- A request grows far past what its pool could hold without the window; its pages stay bounded.
- Returning the pages changes no bit: the same pinned cache with its pages kept (the return
  disabled) gives the same outputs, LSEs and statistics, through prefill, extends, steps and a
  v8 re-scale.
- The output matches float64 attention over the window's keys.
- Calls take the cache's window by default, the same left explicitly, and refuse another.
"""

from __future__ import annotations

import pytest
import torch

import fold_attention as fa
from decode_helpers import bits16, default_scale, floor_err, reference, rel_err, synth

PAGE = 64


def _pinned(left, v8=False, num_pages=None, B=2, max_len=3000, depth=16.0):
    return fa.FoldKVCache(B, 8, 2, 64, max_len, depth=depth, v8=v8, page_size=PAGE,
                          num_pages=num_pages, window_size=(left, 0))


def test_pages_before_the_window_go_back_to_the_pool():
    left = 127  # 128 keys: after a call a request holds the 2 or 3 pages its window spans
    q, k, v = synth(2, 2, 4, 64, 2600, seed=31)
    cache = _pinned(left, num_pages=8)
    for b in range(2):
        cache.add_request()
    cache.extend(0, k[0, :1000], v[0, :1000])  # 16 pages written, 13 back at once
    assert cache.free_pages == 8 - 3
    assert cache.page_table[0].tolist()[:13] == [-1] * 13
    def held(n):  # pages from the one holding key n - 128 to the one holding key n - 1
        return -(-n // PAGE) - max(0, n - left - 1) // PAGE

    for t in range(1000, 2500):
        fa.fold_attn_with_kvcache(q, cache, k[:, t], v[:, t])
        assert cache.free_pages == 8 - sum(held(cache.length(b)) for b in range(2))
    assert [cache.length(b) for b in range(2)] == [2500, 1500]  # 40 + 24 pages' worth of keys
    out, lse = fa.fold_attn_with_kvcache(q, cache, return_lse=True)
    for b, n in ((0, 2500), (1, 1500)):
        ks = torch.cat([k[0, :1000], k[:, 1000:2500][b]]) if b == 0 else k[1, 1000:2500]
        vs = torch.cat([v[0, :1000], v[:, 1000:2500][b]]) if b == 0 else v[1, 1000:2500]
        ref, ref_lse = reference(q[b], ks[n - left - 1:n], vs[n - left - 1:n], default_scale(64))
        assert rel_err(out[b], ref) <= 2.0 * floor_err(ref) + 1e-6
        assert (lse[b].double() - ref_lse).abs().max().item() < 1e-3
    cache.release(0)
    cache.release(1)
    assert cache.free_pages == 8


@pytest.mark.parametrize("v8,depth", [(False, 16.0), (True, 12.0), (False, None)])
def test_returning_the_pages_changes_no_bit(v8, depth, monkeypatch):
    left = 200
    q, k, v = synth(3, 2, 4, 64, 1400, seed=32)
    v[:, 1098] *= 24.0  # a late large value (a step's): v8's scale grows, re-scaling kept keys

    def play(cache):
        qs = torch.randn(3, 8, 64, generator=torch.Generator().manual_seed(5)).bfloat16()
        cu = torch.tensor([0, 300, 301, 950], dtype=torch.int32)
        rows = lambda x: torch.cat([x[0, :300], x[1, :1], x[2, :649]])  # noqa: E731
        results = [cache.prefill(rows(q.new_zeros(3, 1400, 8, 64)), rows(k), rows(v), cu)]
        exps = cache.v_exp.clone()
        for t in range(650, 1300, 7):
            kt, vt = k[:, t], v[:, t]
            results += list(fa.fold_attn_with_kvcache(qs, cache, kt, vt, return_lse=True))
            results.append(torch.tensor(list(cache.stats().values()), dtype=torch.float64))
            if t == 860:
                cache.extend(2, k[2, 700:760], v[2, 700:760])
        if v8:
            assert (cache.v_exp > exps).all()  # every request's scale grew at t = 1098
        return [bits16(x) for x in results], cache.heavy_keys.clone()

    returned, heavy_r = play(_pinned(left, v8, depth=depth, B=3))
    monkeypatch.setattr(fa.FoldKVCache, "_forget_early_pages", lambda *a: None)
    kept_cache = _pinned(left, v8, depth=depth, B=3)
    kept, heavy_k = play(kept_cache)
    assert kept_cache.free_pages < _pinned(left, v8, B=3).num_pages - 3 * 5  # it did keep them
    assert len(returned) == len(kept)
    for i, (a, b) in enumerate(zip(returned, kept)):
        assert torch.equal(a, b), i
    assert torch.equal(heavy_r, heavy_k)


def test_calls_take_the_caches_window():
    cache = _pinned(99)
    assert cache.window_size == (99, 0)
    b = cache.add_request()
    k = torch.randn(300, 2, 64).bfloat16()
    q = torch.randn(2, 8, 64).bfloat16()
    cache.extend(b, k, k)
    implicit = fa.fold_attn_with_kvcache(q, cache)
    same = fa.fold_attn_with_kvcache(q, cache, window_size=(99, 99))  # right hides nothing here
    assert torch.equal(bits16(implicit), bits16(same))
    for other in ((-1, -1), (98, 0), (100, 0)):
        with pytest.raises(ValueError, match="pinned to, \\(99, 0\\)"):
            fa.fold_attn_with_kvcache(q, cache, window_size=other)
    with pytest.raises(ValueError, match="window_size"):
        cache.prefill_request(cache.add_request(), q[:1], k[:1], k[:1], window_size=(-1, -1))
    assert "window_size=(99, 0)" in repr(cache)


def test_a_window_that_hides_nothing_pins_nothing():
    cache = _pinned(3000, max_len=3000)  # left + 1 > max_len: every key is always visible
    b = cache.add_request()
    k = torch.randn(2000, 2, 64).bfloat16()
    cache.extend(b, k, k)
    assert cache.free_pages == cache.num_pages - 32
    fa.fold_attn_with_kvcache(torch.randn(2, 8, 64).bfloat16(), cache, window_size=(-1, -1))


@pytest.mark.parametrize("window_size,exc", [((-2, 0), ValueError), ((5,), ValueError),
                                              (5, TypeError), ((1.5, 0), TypeError)])
def test_window_size_errors(window_size, exc):
    with pytest.raises(exc, match="window_size"):
        fa.FoldKVCache(2, 8, 2, 64, 512, window_size=window_size)


def test_long_prompts_fit_a_pool_of_a_few_windows():
    """Prompts of 2,000 tokens are written in window-sized chunks, each chunk's early pages going
    back before the next is written: two of them fit a pool of 8 pages (25 pages of keys)."""
    left = 127
    q, k, v = synth(2, 2, 4, 64, 2001, seed=33)
    cache = _pinned(left, num_pages=8)
    qp = torch.randn(4000, 8, 64).bfloat16()
    rows = lambda x: torch.cat([x[0, :2000], x[1, :2000]])  # noqa: E731
    cache.prefill(qp, rows(k), rows(v), torch.tensor([0, 2000, 4000], dtype=torch.int32))
    assert cache.free_pages == 8 - 2 * 3  # 2000 keys: the window's 128 span pages 29-31
    out = fa.fold_attn_with_kvcache(q, cache, k[:, 2000], v[:, 2000])
    for b in range(2):
        ref, _ = reference(q[b], k[b, 2001 - 128:2001], v[b, 2001 - 128:2001], default_scale(64))
        assert rel_err(out[b], ref) <= 2.0 * floor_err(ref) + 1e-6
    # In 6 pages: request 0 keeps 3, and request 1's chunks peak at 4 pages.
    small = _pinned(left, num_pages=6)
    with pytest.raises(fa.PagePoolExhausted, match="the prompts need 7 pages"):
        small.prefill(qp, rows(k), rows(v), torch.tensor([0, 2000, 4000], dtype=torch.int32))
    assert small.free_pages == 6 and small.active == []


def test_compiled_steps_give_the_eager_bits():
    """A compiled step (the fold_attention::decode_step op, no host bookkeeping: pages reserved
    up front and none returned) against eager steps that return pages: the same bits, since the
    writers' rule depends on the lengths only."""
    torch._dynamo.reset()
    q, k, v = synth(3, 2, 4, 64, 400, seed=34)
    caches = []
    for reserve in (0, 400):  # the eager steps take their pages as they go
        c = _pinned(99, B=3, max_len=400)
        for b, n in enumerate((300, 1, 130)):
            assert c.add_request(length=reserve) == b
            c.extend(b, k[b, :n], v[b, :n])
        caches.append(c)
    eager, compiled = caches

    def step(cache, q, k, v):
        return fa.fold_attn_with_kvcache(q, cache, k, v, return_lse=True)

    fn = torch.compile(step, fullgraph=True, backend="aot_eager")
    g = torch.Generator().manual_seed(12)
    for _ in range(70):  # request 0 crosses pages 4 -> 5 -> 6
        qs, ks, vs = (torch.randn(3, h, 64, generator=g).bfloat16() for h in (8, 2, 2))
        o1, l1 = step(eager, qs, ks, vs)
        o2, l2 = fn(compiled, qs, ks, vs)
        assert torch.equal(bits16(o1), bits16(o2)) and torch.equal(l1, l2)
    assert torch.equal(eager.heavy_keys, compiled.heavy_keys)
    assert eager.free_pages > compiled.free_pages  # only the eager steps returned pages
    assert eager.page_table[0, :4].tolist() == [-1] * 4
    # An eager step without an append returns what the compiled ones kept.
    fa.fold_attn_with_kvcache(qs, compiled)
    assert compiled.page_table[0, :4].tolist() == [-1] * 4


def test_pages_needed_is_the_appends_peak():
    """A pinned cache's long append is written in chunks, pages going back between them:
    pages_needed is the peak, and the append fits a pool with exactly that many free."""
    k = torch.randn(1000, 2, 64).bfloat16()
    for spare in (0, -1):
        cache = _pinned(127, num_pages=8)
        b = cache.add_request()
        need = cache.pages_needed(b, 1000)
        assert need == 4  # 2 pages of window + a 2-page chunk
        cache.add_request(length=64 * (8 - need - spare))  # leaves need + spare pages free
        if spare == 0:
            cache.extend(b, k, k)
            assert cache.length(b) == 1000
        else:
            with pytest.raises(fa.PagePoolExhausted):
                cache.extend(b, k, k)
            assert cache.length(b) == 0 and cache.free_pages == need - 1
    with pytest.raises(ValueError, match="tokens"):
        cache.pages_needed(b, 3001)


def _books(cache):
    return (cache.free_pages, list(cache._reserved), list(cache._forgotten),
            cache.page_table.clone(), cache.lengths.clone())


def _same_books(a, b):
    assert a[:3] == b[:3] and torch.equal(a[3], b[3]) and torch.equal(a[4], b[4])


@pytest.mark.parametrize("case", ["v_scale", "nan_sink", "pool"])
def test_a_refused_step_takes_no_page(case):
    """A step refused for its values (V beyond a fixed v_scale, a NaN sink) or for the pool
    leaves the pages and lengths as they were (a pinned cache's page returns included)."""
    kw = dict(v8=True, v_scale=1.0) if case == "v_scale" else {}
    cache = fa.FoldKVCache(2, 8, 2, 64, 3000, page_size=PAGE, window_size=(99, 0),
                           num_pages=5 if case == "pool" else 8, **kw)
    k = torch.randn(300, 2, 64).bfloat16().clamp(-3, 3)
    for n in (256, 192):  # both requests at a page's end: the step opens two pages
        cache.extend(cache.add_request(), k[:n], k[:n])
    before = _books(cache)
    q, ks = torch.randn(2, 8, 64).bfloat16(), k[:2]
    vs, sinks = ks.clone(), None
    if case == "v_scale":
        vs[1, 0, 0] = 1000.0
    elif case == "nan_sink":
        sinks = torch.zeros(8)
        sinks[3] = float("nan")
    exc = fa.PagePoolExhausted if case == "pool" else ValueError
    with pytest.raises(exc):
        fa.fold_attn_with_kvcache(q, cache, ks, vs, sinks=sinks)
    _same_books(before, _books(cache))


def test_a_cache_pickled_before_pinned_windows_loads():
    import pickle

    cache = fa.FoldKVCache(2, 8, 2, 64, 512, page_size=PAGE)
    cache.extend(cache.add_request(), torch.randn(70, 2, 64).bfloat16(), torch.randn(70, 2, 64).bfloat16())
    state = cache.__getstate__()
    for name in ("_forgotten", "_pinned", "window_size"):  # what an older cache's state lacks
        del state[name]
    old = fa.FoldKVCache.__new__(fa.FoldKVCache)
    old.__setstate__(state)
    copy = pickle.loads(pickle.dumps(old))
    k = torch.randn(2, 2, 64).bfloat16()
    out = fa.fold_attn_with_kvcache(torch.randn(2, 8, 64).bfloat16(), copy, k, k)
    assert copy.length(0) == 71 and bool(torch.isfinite(out).all())
