"""FoldKVCache.prefill_request on a request that already holds tokens: the chunk after its history
(a conversation's next turn, a prompt's suffix after fork()). CPU reference; the GPU file repeats
the accuracy and the bits against the CPU.

- Each chunk token matches float64 causal attention over the request's history and the chunk up
  to itself, at the bf16 floor, for group sizes 1 to 64, with windows (tokens that see the whole
  history, part of it, none of it), sinks, a pinned cache whose early pages are gone, a deep cache
  (the history is read densely whatever the depth) and v8.
- The chunk's tokens land in the cache as an extend would write them (the next step's bits).
- A refused chunk changes nothing; a fork's chunk leaves its parent as it was.
"""

from __future__ import annotations

import pytest
import torch

import fold_attention as fa
from fold_attention import _history
from decode_helpers import bits16, default_scale, floor_err, rel_err
from helpers import window_mask


def _data(T, H, Hk, D, seed):
    """q (T, H, D), k / v (T, Hk, D) bf16: keys with a heavy tail, values offset from zero."""
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(Hk, D, generator=g)
    u = u / u.norm(dim=-1, keepdim=True)
    e = torch.empty(T, Hk).exponential_(1.0, generator=g)
    k = torch.randn(T, Hk, D, generator=g) + (3.0 * e ** 1.5).unsqueeze(-1) * u
    v = torch.randn(T, Hk, D, generator=g) + 2.0
    q = torch.randn(T, H, D, generator=g) * 0.5 + 2.0 * u.repeat_interleave(H // Hk, 0)
    return q.bfloat16(), k.bfloat16(), v.bfloat16()


def _reference(q, k, v, L, window=(-1, -1), sinks=None):
    """Float64 causal attention of tokens L.. of q over k / v [0, T), FlashAttention's window;
    sinks (H,) in every row's denominator. Returns (T - L, H, D)."""
    T, H, D = q.shape
    G = H // k.shape[1]
    K = k.double().repeat_interleave(G, 1)
    V = v.double().repeat_interleave(G, 1)
    s = torch.einsum("ihd,jhd->hij", q[L:].double(), K) * default_scale(D)
    keep = window_mask(T, True, window, device="cpu")[L:]
    s = s.masked_fill(~keep, float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks.double().view(H, 1, 1).expand(H, T - L, 1)], -1)
    p = torch.softmax(s, -1)[..., :T]
    return torch.einsum("hij,jhd->ihd", p, V)


def _cache(H, Hk, D, max_len, **kw):
    kw.setdefault("page_size", 64)
    return fa.FoldKVCache(2, H, Hk, D, max_len, **kw)


def _run(H, Hk, D, L, n, window=None, sinks=None, other=0, **kw):
    """Request 1 takes L tokens (prefill_request), then an n-token chunk; request 0 holds
    `other` tokens (a neighbour the chunk must not see). Returns (out, reference, cache, data)."""
    q, k, v = _data(L + n, H, Hk, D, seed=L * 7 + n + H)
    cache = _cache(H, Hk, D, L + n + 10, **kw)
    assert cache.add_request() == 0
    if other:
        _, ko, vo = _data(other, H, Hk, D, seed=99)
        cache.extend(0, ko, vo)
    assert cache.add_request() == 1
    call = {} if window is None else dict(window_size=window)
    if sinks is not None:
        call["sinks"] = sinks
    cache.prefill_request(1, q[:L], k[:L], v[:L], **call)
    out = cache.prefill_request(1, q[L:], k[L:], v[L:], **call)
    ref = _reference(q, k, v, L, window if window is not None else (-1, -1), sinks)
    assert out.shape == (n, H, D) and out.dtype == torch.bfloat16
    assert int(cache.lengths[1]) == L + n
    return out, ref, cache, (q, k, v)


@pytest.mark.parametrize("H,Hk,D", [(8, 2, 64), (4, 4, 128), (16, 2, 64), (64, 1, 64), (12, 4, 64)],
                         ids=["G4", "G1-D128", "G8", "G64", "G3"])
def test_chunk_matches_float64(H, Hk, D):
    # 70 tokens: several steps of 64 // G tokens (one token a step at G 64), the last one short.
    out, ref, _, _ = _run(H, Hk, D, L=300, n=70, other=50)
    assert rel_err(out, ref) < 2.0 * floor_err(ref) + 1e-6


def test_a_deep_cache_reads_its_history_densely():
    out, ref, cache, _ = _run(8, 2, 64, L=600, n=33, depth=8.0)
    assert rel_err(out, ref) < 2.0 * floor_err(ref) + 1e-6
    assert cache.depth == 8.0


@pytest.mark.parametrize("route", ["tail", "steps"])
@pytest.mark.parametrize("left", [40, 350, 1000, 0], ids=["narrow", "part", "wide", "self"])
def test_chunk_under_a_window(left, route, monkeypatch):
    # left 40: tokens 0..39 see the history's last 40 - t keys, the rest none of it; left 350:
    # tokens 0..50 see all 300 history keys, the rest part of them; 0: each token itself alone.
    # Both routes: the history keys read back into one forward ("tail", the default here), and
    # decode steps per window ("steps", taken where the window's keys are many).
    if route == "steps":
        monkeypatch.setattr(_history, "TAIL_KEYS_MAX", 0)
    out, ref, _, _ = _run(8, 2, 64, L=300, n=70, window=(left, 0))
    assert rel_err(out, ref) < 2.0 * floor_err(ref) + 1e-6


@pytest.mark.parametrize("v8,D,dtype", [(False, 64, torch.bfloat16), (True, 128, torch.bfloat16),
                                        (False, 256, torch.float16)])
def test_history_tail_reads_the_keys_back(v8, D, dtype):
    """The windowed route's read-back: keys within 1e-4 of the written ones (the planes keep
    ~16 bits), most bit for bit after the rounding to the cache's dtype; values as stored (bf16 /
    fp16) or within v8's pair precision."""
    g = torch.Generator().manual_seed(1)
    L, Hk = 300, 2
    k = (torch.randn(L, Hk, D, generator=g) * 3).to(dtype)
    v = (torch.randn(L, Hk, D, generator=g) + 1).to(dtype)
    c = fa.FoldKVCache(2, 4, Hk, D, 400, page_size=64, v8=v8, dtype=dtype)
    c.add_request()
    c.add_request()
    c.extend(1, k, v)
    kt, vt = _history.history_tail(c, 1, 130)
    assert kt.shape == vt.shape == (130, Hk, D) and kt.dtype == vt.dtype == dtype
    assert ((kt.float() - k[-130:].float()).abs().max() / k.float().abs().max()).item() < 1e-4
    assert (kt == k[-130:]).float().mean().item() > 0.9
    if v8:
        assert rel_err(vt, v[-130:].double()) < 1e-3
    else:
        assert torch.equal(vt, v[-130:])


def test_chunk_with_sinks():
    sinks = torch.tensor([0.5, -1.0, 3.0, float("-inf"), 1.0, 0.0, 2.0, -2.0])
    out, ref, _, _ = _run(8, 2, 64, L=200, n=40, window=(100, 0), sinks=sinks)
    assert rel_err(out, ref) < 2.0 * floor_err(ref) + 1e-6


def test_chunk_on_a_pinned_cache_whose_early_pages_are_gone():
    out, ref, cache, _ = _run(8, 2, 64, L=900, n=150, window=(200, 0), window_size=(200, 0),
                              num_pages=12)
    assert rel_err(out, ref) < 2.0 * floor_err(ref) + 1e-6
    assert cache._forgotten[1] > 0  # pages below the window went back during the prompt


def test_chunk_on_a_v8_cache():
    out, ref, _, _ = _run(8, 2, 64, L=300, n=40, v8=True)
    # The history's values are E4M3 pairs (~bf16's precision), the chunk's own are bf16.
    assert rel_err(out, ref) < 3.0 * floor_err(ref) + 1e-6


@pytest.mark.parametrize("kw", [dict(depth=16.0), dict(depth=None, v8=True, v_scale=2.0**4)],
                         ids=["plain", "v8-fixed"])
def test_the_chunk_is_written_as_an_extend_would(kw):
    H, Hk, D, L, n = 8, 2, 64, 300, 70
    _, _, cache, (q, k, v) = _run(H, Hk, D, L, n, **kw)
    twin = _cache(H, Hk, D, L + n + 10, **kw)
    twin.add_request()
    twin.add_request()
    twin.extend(1, k, v)
    qs = torch.randn(2, H, D).bfloat16()
    a = fa.fold_attn_with_kvcache(qs, cache, return_lse=True)
    b = fa.fold_attn_with_kvcache(qs, twin, return_lse=True)
    assert torch.equal(bits16(a[0][1]), bits16(b[0][1]))
    assert torch.equal(bits16(a[1][1]), bits16(b[1][1]))


def test_a_refused_chunk_changes_nothing():
    H, Hk, D = 8, 2, 64
    q, k, v = _data(120, H, Hk, D, seed=5)
    cache = _cache(H, Hk, D, 100)
    cache.add_request()
    cache.prefill_request(0, q[:80], k[:80], v[:80])
    before = [t.clone() for t in (cache.k_a, cache.k_b, cache.k_scale, cache.v, cache.heavy_keys,
                                  cache.page_table, cache.lengths)]
    free = cache.free_pages
    bad = q[80:90].clone()
    bad[7, 3, 5] = float("nan")
    with pytest.raises(ValueError, match="q holds a non-finite value"):
        cache.prefill_request(0, bad, k[80:90], v[80:90])
    with pytest.raises(ValueError, match="request 0 holds 80 tokens: the chunk's 40 more exceed"):
        cache.prefill_request(0, q[80:120], k[80:120], v[80:120])
    after = (cache.k_a, cache.k_b, cache.k_scale, cache.v, cache.heavy_keys, cache.page_table,
             cache.lengths)
    for x, y in zip(before, after):
        assert torch.equal(x, y)
    assert cache.free_pages == free


def test_a_forks_chunk_leaves_its_parent_as_it_was():
    H, Hk, D = 8, 2, 64
    q, k, v = _data(400, H, Hk, D, seed=6)
    cache = _cache(H, Hk, D, 400)
    cache.add_request()
    cache.prefill_request(0, q[:250], k[:250], v[:250])  # a shared prefix (a system prompt)
    qs = torch.randn(2, H, D).bfloat16()
    parent = fa.fold_attn_with_kvcache(qs, cache)[0]
    child = cache.fork(0)
    out = cache.prefill_request(child, q[250:330], k[250:330], v[250:330])
    ref = _reference(q[:330], k[:330], v[:330], 250)
    assert rel_err(out, ref) < 2.0 * floor_err(ref) + 1e-6
    assert cache.length(0) == 250 and cache.length(child) == 330
    assert torch.equal(bits16(fa.fold_attn_with_kvcache(qs, cache)[0]), bits16(parent))


def test_a_chunk_after_history_refuses_what_it_cannot_honour():
    """Gradients (the history's decode steps have none), NaN / +inf sinks, a q whose rotation
    overflows: each refused naming the argument, before anything is written."""
    H, Hk, D = 8, 2, 64
    q, k, v = _data(120, H, Hk, D, seed=8)
    cache = _cache(H, Hk, D, 200)
    cache.add_request()
    cache.prefill_request(0, q[:80], k[:80], v[:80])
    state = [t.clone() for t in (cache.k_a, cache.v, cache.heavy_keys, cache.page_table, cache.lengths)]
    with pytest.raises(ValueError, match="has no backward"):
        cache.prefill_request(0, q[80:90].clone().requires_grad_(True), k[80:90], v[80:90])
    for bad in (float("nan"), float("inf")):
        sinks = torch.zeros(H)
        sinks[3] = bad
        with pytest.raises(ValueError, match="sinks\\[3\\] must be finite or -inf"):
            cache.prefill_request(0, q[80:90], k[80:90], v[80:90], sinks=sinks)
    huge = q[80:90].clone()
    huge[3, 5] = 1e38
    with pytest.raises(ValueError, match="q is too large"):
        cache.prefill_request(0, huge, k[80:90], v[80:90])
    for x, y in zip(state, (cache.k_a, cache.v, cache.heavy_keys, cache.page_table, cache.lengths)):
        assert torch.equal(x, y)
    with torch.no_grad():
        out = cache.prefill_request(0, q[80:90].clone().requires_grad_(True), k[80:90], v[80:90])
    assert out.shape == (10, H, D) and int(cache.lengths[0]) == 90


@pytest.mark.parametrize("dtype,big", [(torch.bfloat16, 1e37), (torch.float16, 65504.0)],
                         ids=["bf16-1e37", "fp16-max"])
def test_windowed_read_back_of_extreme_keys_stays_finite(dtype, big):
    """Keys the writer takes at the dtype's edge (bf16 1e37, whose D-fold sum overflows float32;
    fp16 +-65504, whose read-back can land past 65504) come back finite, and the windowed chunk
    matches float64 attention over the keys the cache holds (one huge element leaves the row's
    others to the planes' step, scale / 512: the history's keys are what the cache kept)."""
    H, Hk, D, L, n = 8, 2, 64, 100, 4
    q, k, v = _data(L + n, H, Hk, D, seed=21)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    g = torch.Generator().manual_seed(22)
    if dtype == torch.float16:  # every element at +-65504 (the read-back's rounding reaches past it)
        k[:L] = big * torch.sign(torch.randn(L, Hk, D, generator=g)).to(dtype)
        q = q / 4096  # (moderate logits)
    else:  # one element per key: the rotation's D-fold sums reach 6.4e38 > FLT_MAX
        k[:L, :, 0] = big * torch.sign(torch.randn(L, Hk, generator=g)).to(dtype)
        q = q / 4
        q[:, :, 0] = 0
    cache = _cache(H, Hk, D, L + n + 10, dtype=dtype)
    cache.add_request()
    cache.extend(0, k[:L], v[:L])
    kt, _ = _history.history_tail(cache, 0, 50)
    assert bool(torch.isfinite(kt).all())
    out = cache.prefill_request(0, q[L:], k[L:], v[L:], window_size=(50, 0))
    held = k.clone()
    held[L - 50:L] = kt  # (keys before L - 50 are outside every token's window)
    ref = _reference(q, held, v, L, (50, 0))
    assert bool(torch.isfinite(out).all())
    assert rel_err(out, ref) < 2.0 * floor_err(ref) + 1e-6



def test_runs_split_into_equal_copies():
    # (t0, t1, window_before, k): one call per run of one window, P = ceil(n / k) copies of k
    # <= m tokens, fewer than P of them padding.
    assert _history._runs([0] * 70, 16) == [(0, 70, 0, 14)]  # 5 x 14
    assert _history._runs([0] * 90, 16) == [(0, 90, 0, 15)]  # 6 x 15
    assert _history._runs([0] * 17, 16) == [(0, 17, 0, 9)]  # 2 x 9, one padded token (G rows)
    assert _history._runs([0] * 5, 16) == [(0, 5, 0, 5)]
    assert _history._runs([7, 7, 3, None, None], 1) == [(0, 2, 7, 1), (2, 3, 3, 1)]


@pytest.mark.parametrize("H,Hk,n", [(8, 2, 48), (8, 2, 46), (12, 4, 63)], ids=["G4", "G4-pad", "G3"])
def test_history_in_one_call_equals_one_group_at_a_time(H, Hk, n, monkeypatch):
    """history_attention reads the history for all of the chunk's groups in one call (copies of
    the request); a request's step depends on its own rows alone, so each copy's rows equal a call
    over that group's tokens alone, bit for bit. (At 46 tokens, three copies of 16: the last holds
    14 real tokens and 2 of zero queries, whose rows leave the real rows' bits unchanged.)"""
    assert n != 46 or _history._runs([0] * n, 16) == [(0, 46, 0, 16)]
    D, L = 64, 260
    q, k, v = _data(L + n, H, Hk, D, seed=5)
    cache = _cache(H, Hk, D, L + n + 10)
    cache.add_request()
    cache.add_request()
    cache.extend(1, k[:L], v[:L])
    out, lse = _history.history_attention(cache, 1, q[L:], 0)
    (_, _, _, kk), = _history._runs([0] * n, 64 // (H // Hk))
    for t0 in range(0, n, kk):
        o, s = _history.history_attention(cache, 1, q[L + t0:L + min(n, t0 + kk)], 0)
        assert torch.equal(bits16(o), bits16(out[t0:t0 + kk])) and torch.equal(s, lse[t0:t0 + kk])
    # Calls of at most two copies (as the CUDA workspace budget splits a long chunk): the same.
    monkeypatch.setattr(_history, "_MAX_COPIES", 2)
    o, s = _history.history_attention(cache, 1, q[L:], 0)
    assert torch.equal(bits16(o), bits16(out)) and torch.equal(s, lse)


def test_the_one_read_value_check_passes_only_what_every_check_passes():
    """prefill_request's one-read check (_plain_values) is a sufficient test: True for ordinary
    values; False for a NaN or inf in q, k or v, for keys or scaled queries near FLT_MAX / D (the
    checks one by one then decide and name the input), and always for a fixed v_scale."""
    H, Hk, D = 8, 2, 64
    q, k, v = _data(20, H, Hk, D, seed=3)
    cache = _cache(H, Hk, D, 100)
    assert cache._plain_values(q, k, v)
    for name in ("q", "k", "v"):
        for bad in (float("nan"), float("inf")):
            x = {"q": q, "k": k, "v": v}
            x[name] = x[name].clone()
            x[name][3, 1, 5] = bad
            assert not cache._plain_values(x["q"], x["k"], x["v"])
    big = k.clone()
    big[0, 0, 0] = 2.0 ** 121
    assert not cache._plain_values(q, big, v)
    assert not _cache(H, Hk, D, 100, v8=True, v_scale=1.0)._plain_values(q, k, v)


@pytest.mark.parametrize("window", [None, (40, 0)], ids=["causal", "window"])
def test_a_prompt_gives_the_varlen_calls_bits(window):
    """prefill_request runs its forward as a dense batch of one (no offsets to read back): the
    bits of fold_attn_varlen_func over cu_seqlens [0, n], with a window and sinks too."""
    H, Hk, D, n = 8, 2, 64, 150
    q, k, v = _data(n, H, Hk, D, seed=21)
    sinks = torch.linspace(-1.0, 2.0, H)
    cache = _cache(H, Hk, D, n + 10)
    cache.add_request()
    kw = {} if window is None else {"window_size": window}
    out = cache.prefill_request(0, q, k, v, sinks=sinks, **kw)
    ref = fa.fold_attn_varlen_func(q, k, v, torch.tensor([0, n], dtype=torch.int32), causal=True,
                                   sinks=sinks, **kw)
    assert torch.equal(bits16(out), bits16(ref))


def test_an_inactive_request_is_refused():
    """prefill_request reads the request's length once and refuses a slot that holds no request
    (never added, or released), naming it, with the cache unchanged."""
    H, Hk, D = 8, 2, 64
    q, k, v = _data(10, H, Hk, D, seed=4)
    cache = _cache(H, Hk, D, 100)
    with pytest.raises(ValueError, match="request 0 is not active"):
        cache.prefill_request(0, q, k, v)
    cache.add_request()
    cache.prefill_request(0, q, k, v)
    cache.release(0)
    with pytest.raises(ValueError, match="request 0 is not active"):
        cache.prefill_request(0, q, k, v)
    assert cache.lengths.tolist() == [-1, -1] and cache.free_pages == cache.num_pages
