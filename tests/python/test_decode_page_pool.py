"""FoldKVCache(num_pages=...): request slots sharing a pool smaller than every slot at max_len.

- A request's output bits do not depend on which pages it holds: a small pool whose pages
  were handed out, released and handed out again in another order gives the full pool's bits.
- Every operation that needs more pages than are free (add_request, extend, prefill,
  prefill_request, an appending step) raises PagePoolExhausted and leaves the cache as it was.
- free_pages / pages_needed account for every page taken and returned.
(CPU reference; tests/python/test_gpu_decode_page_pool.py runs the pool on the GPU.)
"""

from __future__ import annotations

import pytest
import torch

import fold_attention as fa
from decode_helpers import CACHE_STATE, POOL_SCRIPT, bits16, play_pool_script, synth

PAGE = 64


def _state(cache):
    """Everything a failed operation must leave unchanged: the buffers and the host's books."""
    bufs = {n: getattr(cache, n).clone() for n in CACHE_STATE if getattr(cache, n) is not None}
    books = (list(cache._free_pages), [list(r) for r in cache._pages_host], list(cache._reserved),
             list(cache._forgotten))
    return bufs, books


def _assert_state(cache, state):
    bufs, books = state
    for name, x in bufs.items():
        assert torch.equal(getattr(cache, name), x), name
    assert (list(cache._free_pages), [list(r) for r in cache._pages_host], list(cache._reserved),
            list(cache._forgotten)) == books


@pytest.mark.parametrize("depth,v8", [(None, False), (16.0, False), (12.0, True)])
def test_small_pool_gives_the_full_pools_bits(depth, v8):
    B, Hkv, G, D = 4, 2, 4, 64
    q, k, v = synth(B, Hkv, G, D, 260, seed=11)
    kw = dict(depth=depth, v8=v8, page_size=PAGE)
    full = fa.FoldKVCache(B, Hkv * G, Hkv, D, 512, **kw)
    # At the script's peak the requests hold 4 + 2 + 4 + 5 = 15 pages (of the full pool's 32).
    small = fa.FoldKVCache(B, Hkv * G, Hkv, D, 512, num_pages=15, **kw)
    for b in range(B):  # the full pool's free list reordered: its requests get other pages
        full.add_request(length=256)
    for b in range(B):
        full.release(b)
    ref = play_pool_script(full, q, k, v, POOL_SCRIPT)
    got = play_pool_script(small, q, k, v, POOL_SCRIPT)
    assert small.free_pages == 0
    assert sorted(p for row in small.page_table.tolist() for p in row if p >= 0) == list(range(15))
    assert small.page_table.tolist() != full.page_table.tolist()  # other pages, same bits
    for (oa, la, sa), (ob, lb, sb) in zip(ref, got):
        assert torch.equal(bits16(oa), bits16(ob)) and torch.equal(bits16(la), bits16(lb))
        assert sa == sb


def test_more_slots_than_fit_at_max_len():
    """Eight slots of max_len 1024 (128 pages at max_len) served by a 40-page pool."""
    B, Hkv, G, D = 8, 1, 2, 64
    q, k, v = synth(B, Hkv, G, D, 330, seed=12)
    cache = fa.FoldKVCache(B, Hkv * G, Hkv, D, 1024, page_size=PAGE, num_pages=40)
    assert cache.num_pages == 40 and cache.free_pages == 40
    for b in range(B):
        assert cache.add_request() == b
        cache.extend(b, k[b, :300], v[b, :300])  # 5 pages each
    assert cache.free_pages == 0
    assert [cache.pages_needed(b) for b in range(B)] == [0] * B
    for t in range(300, 320):  # room in every last page
        fa.fold_attn_with_kvcache(q, cache, k[:, t], v[:, t])
    assert cache.pages_needed(0, tokens=0) == 0 and cache.pages_needed(0, tokens=1) == 1
    state = _state(cache)
    with pytest.raises(fa.PagePoolExhausted, match="1 more pages .* 0 of the pool's 40 are free"):
        cache.extend(0, k[0, 320:321], v[0, 320:321])
    _assert_state(cache, state)
    cache.release(5)
    assert cache.free_pages == 5
    cache.extend(0, k[0, 320:321], v[0, 320:321])
    assert cache.free_pages == 4 and cache.length(0) == 321


def _pool_cache(num_pages):
    cache = fa.FoldKVCache(3, 4, 2, 64, 512, page_size=PAGE, num_pages=num_pages)
    return cache, torch.randn(600, 2, 64).bfloat16()


def test_add_request_refuses_a_reservation_beyond_the_free_pages():
    cache, k = _pool_cache(6)
    cache.add_request(length=256)  # 4 pages
    state = _state(cache)
    with pytest.raises(fa.PagePoolExhausted, match="add_request: a request of length 200 needs 4"):
        cache.add_request(length=200)
    _assert_state(cache, state)
    assert cache.active == [0]
    assert cache.add_request(length=128) == 1 and cache.free_pages == 0


def test_prefill_refuses_prompts_beyond_the_pool_before_releasing_anything():
    cache, k = _pool_cache(5)
    b = cache.add_request()
    cache.extend(b, k[:100], k[:100])
    state = _state(cache)
    q = torch.randn(400, 4, 64).bfloat16()
    with pytest.raises(fa.PagePoolExhausted, match="the prompts need 9 pages"):
        cache.prefill(q, k[:400], k[:400], torch.tensor([0, 130, 260, 400], dtype=torch.int32))
    _assert_state(cache, state)
    cache.prefill(q[:300], k[:300], k[:300], torch.tensor([0, 128, 256, 300], dtype=torch.int32))
    assert cache.free_pages == 0 and cache.active == [0, 1, 2]


def test_prefill_request_refuses_before_its_forward():
    cache, k = _pool_cache(4)
    cache.add_request(length=192)
    b = cache.add_request()
    state = _state(cache)
    q = torch.randn(100, 4, 64).bfloat16()
    with pytest.raises(fa.PagePoolExhausted, match=f"request {b}'s prompt of 100 tokens needs 2"):
        cache.prefill_request(b, q, k[:100], k[:100])
    _assert_state(cache, state)
    cache.prefill_request(b, q[:64], k[:64], k[:64])
    assert cache.free_pages == 0


def test_a_step_that_cannot_open_every_page_appends_nothing():
    """Two requests at a page's end, one free page: the step raises before appending to
    either (and before taking the one page)."""
    cache, k = _pool_cache(5)
    for n in (128, 64):
        cache.extend(cache.add_request(), k[:n], k[:n])
    assert cache.free_pages == 2
    cache.extend(cache.add_request(), k[:10], k[:10])  # request 2: one page, room left
    assert cache.free_pages == 1
    state = _state(cache)
    q = torch.randn(3, 4, 64).bfloat16()
    step = torch.randn(3, 2, 64).bfloat16()
    with pytest.raises(fa.PagePoolExhausted, match="appending a token to 2 requests needs 2"):
        fa.fold_attn_with_kvcache(q, cache, step, step)
    _assert_state(cache, state)
    fa.fold_attn_with_kvcache(q, cache)  # attending alone needs no page
    cache.release(2)
    fa.fold_attn_with_kvcache(q, cache, step, step)
    assert [cache.length(b) for b in (0, 1)] == [129, 65] and cache.free_pages == 0


@pytest.mark.parametrize(
    "num_pages,exc,match",
    [
        (0, ValueError, "num_pages"),
        (-3, ValueError, "num_pages"),
        (25, ValueError, r"num_pages \(25\) exceeds batch x ceil\(max_len / page_size\) = 24"),
        (2.0, TypeError, "num_pages"),
        (True, TypeError, "num_pages"),
        ("8", TypeError, "num_pages"),
    ],
)
def test_num_pages_errors(num_pages, exc, match):
    with pytest.raises(exc, match=match):
        fa.FoldKVCache(3, 4, 2, 64, 512, page_size=PAGE, num_pages=num_pages)


def test_pages_needed_errors_and_default_pool():
    cache = fa.FoldKVCache(3, 4, 2, 64, 500, page_size=PAGE)
    assert cache.num_pages == 3 * 8 == cache.free_pages
    assert "num_pages=24" in repr(cache)
    with pytest.raises(ValueError, match="request 0 is not active"):
        cache.pages_needed(0)
    b = cache.add_request()
    with pytest.raises(ValueError, match="tokens"):
        cache.pages_needed(b, tokens=501)
    assert cache.pages_needed(b, tokens=500) == 8
