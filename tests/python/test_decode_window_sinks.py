"""Sliding windows and attention sinks in decode steps (fold_attn_with_kvcache's window_size and
sinks, FoldKVCache.prefill's): the CPU reference against float64 attention over the window's
keys with the sinks in the denominator, windows that hide nothing keep the plain bits, keys
before the window are never read, torch.compile, argument errors, and a CUDA step's."""

from __future__ import annotations

import re

import pytest
import torch

import fold_attention as fa
from decode_helpers import default_scale, filled_cache, floor_err, rel_err, synth
from helpers import gpu_ready


def _reference(q, ks, vs, scale, window=None, sinks=None):
    """Float64 attention of q (H, D) over the last `window` keys of ks/vs (L, Hkv, D), with
    sinks (H,) in the denominator: out (H, D), natural LSE (H,)."""
    if window is not None:
        ks, vs = ks[-window:], vs[-window:]
    H, Hkv = q.shape[0], ks.shape[1]
    G = H // Hkv
    K = ks.double().repeat_interleave(G, 1)
    V = vs.double().repeat_interleave(G, 1)
    s = torch.einsum("hd,jhd->hj", q.double(), K) * scale
    if sinks is not None:
        s = torch.cat([s, sinks.double()[:, None]], dim=1)
        V = torch.cat([V, torch.zeros_like(V[:1])], dim=0)  # the sink's column has no value
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[:, None])
    return torch.einsum("hj,jhd->hd", p, V), lse


def _names(exc_info, arg):
    return re.search(rf"(?<![\w.]){re.escape(arg)}(?!\w)", str(exc_info.value)) is not None


@pytest.mark.parametrize("depth", [None, 16])
@pytest.mark.parametrize("v8", [False, True])
def test_windowed_steps_with_sinks_match_float64(depth, v8):
    B, Hkv, G, D, L = 3, 2, 4, 64, 700
    q, k, v = synth(B, Hkv, G, D, L, seed=21)
    lengths = [700, 1, 300]
    cache = filled_cache(k, v, lengths, Hkv * G, depth=depth, v8=v8, max_len=704)
    base = torch.stack([_reference(q[b], k[b, :n], v[b, :n], default_scale(D))[1] for b, n in
                        enumerate(lengths)]).mean(0)  # (H,): sinks around the rows' own mass
    g = torch.Generator().manual_seed(3)
    for window, sinks in [(128, None), (None, base + torch.randn(Hkv * G, generator=g) * 3),
                          (128, base - 1.0), (513, base + 6.0), (1, None)]:
        out, lse = fa.fold_attn_with_kvcache(q, cache, return_lse=True,
                                             window_size=(-1 if window is None else window - 1, 0),
                                             sinks=sinks)
        for b, n in enumerate(lengths):
            w = None if window is None else min(window, n)
            ref, ref_lse = _reference(q[b], k[b, :n], v[b, :n], default_scale(D), w, sinks)
            tag = (window, sinks is not None, b)
            assert rel_err(out[b], ref) <= 2.0 * floor_err(ref) + 1e-6, tag
            assert (lse[b].double() - ref_lse).abs().max() < 1e-3, tag


def test_prefill_and_steps_with_a_window_and_sinks():
    """The layer's window and sinks through prefill (the training forward) and then steps."""
    Hkv, G, D, n, w = 1, 4, 64, 200, 64
    g = torch.Generator().manual_seed(4)
    q = torch.randn(n, Hkv * G, D, generator=g).bfloat16()
    k = torch.randn(n, Hkv, D, generator=g).bfloat16()
    v = (torch.randn(n, Hkv, D, generator=g) + 1).bfloat16()
    sinks = torch.randn(Hkv * G, generator=g)
    cu = torch.tensor([0, n], dtype=torch.int32)
    cache = fa.FoldKVCache(1, Hkv * G, Hkv, D, max_len=256, depth=16)
    out = cache.prefill(q, k, v, cu, window_size=(w - 1, 0), sinks=sinks)
    assert torch.equal(out, fa.fold_attn_varlen_func(q, k, v, cu, causal=True, window_size=(w - 1, 0),
                                                     sinks=sinks))
    ks, vs = k, v
    for _ in range(3):
        qs = torch.randn(1, Hkv * G, D, generator=g).bfloat16()
        kst = torch.randn(1, Hkv, D, generator=g).bfloat16()
        vst = (torch.randn(1, Hkv, D, generator=g) + 1).bfloat16()
        o = fa.fold_attn_with_kvcache(qs, cache, kst, vst, window_size=(w - 1, w - 1), sinks=sinks)
        ks, vs = torch.cat([ks, kst]), torch.cat([vs, vst])
        ref, _ = _reference(qs[0], ks, vs, default_scale(D), w, sinks)
        assert rel_err(o[0], ref) <= 2.0 * floor_err(ref) + 1e-6


def test_a_window_that_hides_nothing_and_minus_inf_sinks_keep_the_plain_bits():
    B, Hkv, G, D, L = 2, 2, 2, 64, 300
    q, k, v = synth(B, Hkv, G, D, L, seed=22)
    cache = filled_cache(k, v, [300, 120], Hkv * G, depth=16, max_len=320)
    plain, plain_lse = fa.fold_attn_with_kvcache(q, cache, return_lse=True)
    for window_size, sinks in [((319, 0), None), ((10**6, -1), None), ((-1, -1), None),
                               ((-1, -1), torch.full((Hkv * G,), float("-inf")))]:
        out, lse = fa.fold_attn_with_kvcache(q, cache, return_lse=True, window_size=window_size,
                                             sinks=sinks)
        assert torch.equal(out.view(torch.int16), plain.view(torch.int16)), window_size
        assert torch.equal(lse, plain_lse), window_size


def test_keys_before_the_window_are_never_read():
    B, Hkv, G, D, L, w = 1, 2, 2, 64, 400, 150
    q, k, v = synth(B, Hkv, G, D, L, seed=23)
    cache = filled_cache(k, v, [L], Hkv * G, depth=16, max_len=448, page_size=64)
    before = fa.fold_attn_with_kvcache(q, cache, window_size=(w - 1, 0))
    # Overwrite the K planes, scales and V of every key before the window (pages 0-3 hold keys
    # 0..255; the window starts at key 250: scramble keys 0..249 only).
    first = L - w
    page = cache.page_table[0].tolist()
    for j in range(first):
        p, r = page[j // 64], j % 64
        cache.k_a[p, :, r] = -cache.k_a[p, :, r]
        cache.k_b[p, :, r] = 7
        cache.k_scale[p, :, r] = cache.k_scale[p, :, r] * 4
        cache.v[p, :, r] = -cache.v[p, :, r] * 3
    after = fa.fold_attn_with_kvcache(q, cache, window_size=(w - 1, 0))
    assert torch.equal(before.view(torch.int16), after.view(torch.int16))
    # ... and the scrambled keys do matter to a step that sees them.
    plain = fa.fold_attn_with_kvcache(q, cache)
    assert not torch.equal(plain.view(torch.int16), after.view(torch.int16))


def test_compiled_step_with_a_window_and_sinks_matches_eager():
    torch._dynamo.reset()
    B, Hkv, G, D, L = 2, 2, 4, 64, 300
    q, k, v = synth(B, Hkv, G, D, L, seed=24)
    eager = filled_cache(k, v, [300, 40], Hkv * G, depth=16, max_len=320)
    compiled = filled_cache(k, v, [300, 40], Hkv * G, depth=16, max_len=320)
    for c in (eager, compiled):
        for b in range(B):
            c._reserve(b, 310)
    sinks = torch.linspace(-2.0, 3.0, Hkv * G)
    g = torch.Generator().manual_seed(5)

    def step(cache, q, k, v):
        return fa.fold_attn_with_kvcache(q, cache, k, v, return_lse=True, window_size=(99, 0),
                                         sinks=sinks)

    fn = torch.compile(step, fullgraph=True, backend="eager")
    for _ in range(3):
        qs = torch.randn(B, Hkv * G, D, generator=g).bfloat16()
        ks = torch.randn(B, Hkv, D, generator=g).bfloat16()
        vs = torch.randn(B, Hkv, D, generator=g).bfloat16()
        o1, l1 = step(eager, qs, ks, vs)
        o2, l2 = fn(compiled, qs, ks, vs)
        assert torch.equal(o1.view(torch.int16), o2.view(torch.int16))
        assert torch.equal(l1, l2)


@pytest.mark.parametrize(
    "kwargs,exc,arg",
    [
        ({"window_size": 5}, TypeError, "window_size"),
        ({"window_size": (5,)}, ValueError, "window_size"),
        ({"window_size": (-2, 0)}, ValueError, "window_size[0]"),
        ({"window_size": (4, 1.5)}, TypeError, "window_size[1]"),
        ({"sinks": [0.0] * 4}, TypeError, "sinks"),
        ({"sinks": torch.zeros(3)}, ValueError, "sinks"),
        ({"sinks": torch.zeros(4, dtype=torch.int32)}, TypeError, "sinks"),
        ({"sinks": torch.tensor([0.0, float("nan"), 0.0, 0.0])}, ValueError, "sinks[1]"),
        ({"sinks": torch.tensor([0.0, 0.0, 0.0, float("inf")])}, ValueError, "sinks[3]"),
    ],
)
def test_step_argument_errors(kwargs, exc, arg):
    q, k, v = synth(1, 1, 4, 64, 20, seed=25)
    cache = filled_cache(k, v, [20], 4, depth=16, max_len=64)
    lengths = cache.lengths.clone()
    with pytest.raises(exc) as e:
        fa.fold_attn_with_kvcache(q, cache, k[:, 0], v[:, 0], **kwargs)
    assert _names(e, arg), str(e.value)
    assert torch.equal(cache.lengths, lengths)  # nothing appended


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ready()[0], reason=gpu_ready()[1])
def test_cuda_steps_take_a_window_and_sinks():
    # (The CUDA kernels' own tests: test_gpu_decode_window_sinks.py.) A CUDA cache runs a window
    # and sinks (it refused them before the kernels had them), within one output rounding of the
    # CPU reference (bf16 V: the value product on the tensor cores), and a window as long as
    # max_len hides nothing: the plain step runs.
    q, k, v = synth(1, 1, 4, 64, 20, seed=26)
    caches = []
    for device in ("cpu", "cuda"):
        cache = fa.FoldKVCache(1, 4, 1, 64, max_len=64, depth=16, device=device)
        cache.add_request()
        cache.extend(0, k[0].to(device), v[0].to(device))
        caches.append(cache)
    cpu, cuda = caches
    sinks = torch.tensor([0.5, -1.0, float("-inf"), 3.0])
    for window_size, s in (((9, 0), None), ((-1, -1), sinks), ((9, 0), sinks)):
        oc, lc = fa.fold_attn_with_kvcache(q, cpu, window_size=window_size, sinks=s, return_lse=True)
        og, lg = fa.fold_attn_with_kvcache(q.cuda(), cuda, window_size=window_size,
                                           sinks=None if s is None else s.cuda(), return_lse=True)
        og, lg = og.cpu(), lg.cpu()
        bound = 2.0**-7 * oc.double().abs() + 1e-5 * oc.double().abs().max()
        assert ((og.double() - oc.double()).abs() <= bound).all(), window_size
        assert (lg.double() - lc.double()).abs().max() <= 1e-5, window_size
    out = fa.fold_attn_with_kvcache(q.cuda(), cuda, window_size=(63, 0))
    assert torch.equal(out, fa.fold_attn_with_kvcache(q.cuda(), cuda))
    assert cuda.lengths.tolist() == [20]
