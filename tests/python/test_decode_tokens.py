"""fold_attn_with_kvcache with n > 1 new tokens per request (q (batch, n, H, D)): n steps, query i
seeing its request's cache up to itself. CPU reference; the GPU file repeats the equivalence.

- The call gives the bits of n single-token calls, for plain, pinned-window and v8 caches.
- Each query matches float64 causal attention over its request's keys up to itself.
- A refused call (a non-finite value in a later token, a full request, the pool) changes nothing.
"""

from __future__ import annotations

import pytest
import torch

import fold_attention as fa
from decode_helpers import bits16, default_scale, floor_err, reference, rel_err, synth


def _cache(**kw):
    kw.setdefault("page_size", 64)
    return fa.FoldKVCache(3, 8, 2, 64, 800, **kw)


def _filled(q, k, v, **kw):
    cache = _cache(**kw)
    for b, n in enumerate((300, 1, 130)):
        assert cache.add_request() == b
        cache.extend(b, k[b, :n], v[b, :n])
    return cache


@pytest.mark.parametrize("kw", [dict(depth=16.0), dict(depth=None), dict(depth=12.0, v8=True),
                                dict(depth=16.0, window_size=(99, 0), num_pages=20)],
                         ids=["depth16", "dense", "v8", "pinned"])
def test_tokens_give_the_bits_of_single_steps(kw):
    q, k, v = synth(3, 2, 4, 64, 800, seed=51)
    g = torch.Generator().manual_seed(52)
    n = 70  # request 1 crosses a page, request 0 two
    qs = torch.randn(3, n, 8, 64, generator=g).bfloat16()
    ks = torch.randn(3, n, 2, 64, generator=g).bfloat16()
    vs = torch.randn(3, n, 2, 64, generator=g).bfloat16()
    one = _filled(q, k, v, **kw)
    singles = [fa.fold_attn_with_kvcache(qs[:, i], one, ks[:, i], vs[:, i], return_lse=True)
               for i in range(n)]
    many = _filled(q, k, v, **kw)
    out, lse = fa.fold_attn_with_kvcache(qs, many, ks, vs, return_lse=True)
    assert out.shape == (3, n, 8, 64) and lse.shape == (3, n, 8)
    for i, (o, l1) in enumerate(singles):
        assert torch.equal(bits16(out[:, i]), bits16(o)), i
        assert torch.equal(bits16(lse[:, i]), bits16(l1)), i
    assert many.lengths.tolist() == [370, 71, 200]
    assert many.free_pages == one.free_pages


def test_each_query_sees_its_request_up_to_itself():
    q, k, v = synth(3, 2, 4, 64, 800, seed=53)
    cache = _filled(q, k, v, depth=None)
    n = 5
    qs = torch.randn(3, n, 8, 64).bfloat16()
    out = fa.fold_attn_with_kvcache(qs, cache, k[:, 400:400 + n], v[:, 400:400 + n])
    for b, L in enumerate((300, 1, 130)):
        for i in range(n):
            keys = torch.cat([k[b, :L], k[b, 400:400 + i + 1]])
            vals = torch.cat([v[b, :L], v[b, 400:400 + i + 1]])
            ref, _ = reference(qs[b, i], keys, vals, default_scale(64))
            assert rel_err(out[b, i], ref) <= 2.0 * floor_err(ref) + 1e-6, (b, i)


@pytest.mark.parametrize("case", ["nan_late_token", "nan_free_row", "huge_q", "full", "pool", "no_kv",
                                  "shape"])
def test_a_refused_call_changes_nothing(case):
    q, k, v = synth(3, 2, 4, 64, 800, seed=54)
    cache = _filled(q, k, v, num_pages=11 if case == "pool" else 39)  # 5 + 1 + 3 pages held
    n = 4
    qs, ks, vs = torch.randn(3, n, 8, 64).bfloat16(), k[:, 500:504].clone(), v[:, 500:504].clone()
    exc, match = ValueError, None
    if case == "nan_late_token":
        vs[2, 3, 1, 5] = float("nan")
        match = "v_step holds a non-finite value"
    elif case == "nan_free_row":  # each step tests the whole q, free slots' rows included
        cache.release(1)
        qs[1, 2, 0, 0] = float("nan")
        match = "q_step holds a non-finite value"
    elif case == "huge_q":  # finite, but its scaled rotation overflows float32 (the C check)
        qs[0, 1] = 3e38
        match = "q_step is too large"
    elif case == "full":
        cache.extend(1, k[1, 1:798], v[1, 1:798])  # 798 of 800 tokens
        match = "request 1 holds 798 tokens: 4 more exceed max_len 800"
    elif case == "pool":
        cache.extend(0, k[0, 300:320], v[0, 300:320])  # request 0 at its page's end: 5 pages
        cache.extend(2, k[2, 130:192], v[2, 130:192])  # request 2 likewise: 3 pages
        cache.extend(1, k[1, 1:64], v[1, 1:64])  # request 1 at its page's end: 9 of 11 held
        exc, match = fa.PagePoolExhausted, "appending 4 tokens to 3 requests needs 3"
    elif case == "no_kv":
        ks = vs = None
        match = "need k_step and v_step"
    else:
        ks = ks[:, :3]
        match = "k_step must have shape"
    before = {name: getattr(cache, name).clone() for name in ("k_a", "v", "lengths", "page_table")}
    free = cache.free_pages
    with pytest.raises(exc, match=match):
        fa.fold_attn_with_kvcache(qs, cache, ks, vs)
    for name, x in before.items():
        assert torch.equal(getattr(cache, name), x), name
    assert cache.free_pages == free
