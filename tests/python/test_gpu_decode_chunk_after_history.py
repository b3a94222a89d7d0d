"""GPU: FoldKVCache.prefill_request on a CUDA request that already holds tokens (the chunk after
its history). The chunk matches float64 causal attention at the bf16 floor (group sizes 1 to 64,
windows, sinks); the history part (dense decode steps whose groups hold several tokens' rows)
matches the CPU reference's within one rounding; the chunk lands in the cache as an extend writes
it. Skipped without a CUDA device or a CUDA build."""

from __future__ import annotations

import pytest
import torch

import fold_attention as fa
import fold_attention._history
from decode_helpers import assert_matches_cpu, bits16, floor_err, rel_err
from fold_attention._history import _runs, history_attention
from helpers import gpu_ready
from test_decode_chunk_after_history import _data, _reference

_READY, _WHY = gpu_ready()
CUDA = torch.device("cuda")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _READY, reason=_WHY)]


def _pair(H, Hk, D, L, n, **kw):
    """The same request (L tokens) in a CUDA and a CPU cache; a neighbour in slot 0."""
    q, k, v = _data(L + n, H, Hk, D, seed=L + 3 * n + H)
    _, ko, vo = _data(90, H, Hk, D, seed=98)
    caches = []
    for dev in (CUDA, "cpu"):
        c = fa.FoldKVCache(2, H, Hk, D, L + n + 10, page_size=64, device=dev, **kw)
        c.add_request()
        c.extend(0, ko.to(dev), vo.to(dev))
        c.add_request()
        c.extend(1, k[:L].to(dev), v[:L].to(dev))
        caches.append(c)
    return caches, (q, k, v)


@pytest.mark.parametrize("H,Hk,D", [(8, 2, 64), (32, 8, 128), (16, 2, 128), (64, 1, 64),
                                    (12, 4, 256), (4, 4, 64)],
                         ids=["G4", "G4-D128", "G8-D128", "G64", "G3-D256", "G1"])
@pytest.mark.parametrize("window", [(-1, -1), (100, 0)], ids=["all", "window"])
def test_chunk_on_cuda(H, Hk, D, window):
    L, n = 700, 90
    (gpu, cpu), (q, k, v) = _pair(H, Hk, D, L, n)
    before = window[0] + 1 if window[0] >= 0 else 0
    hg, lg = history_attention(gpu, 1, q[L:].to(CUDA), before)
    hc, lc = history_attention(cpu, 1, q[L:], before)
    assert_matches_cpu(hc, hg.cpu(), lc, lg.cpu(), exact=False)
    out = gpu.prefill_request(1, q[L:].to(CUDA), k[L:].to(CUDA), v[L:].to(CUDA), window_size=window)
    ref = _reference(q, k, v, L, window)
    assert rel_err(out.cpu(), ref) < 2.0 * floor_err(ref) + 1e-6
    assert gpu.lengths.tolist() == [90, L + n]


def test_chunk_with_sinks_on_cuda():
    H, Hk, D, L, n = 8, 2, 64, 400, 50
    (gpu, _), (q, k, v) = _pair(H, Hk, D, L, n, depth=16.0)
    sinks = torch.tensor([0.5, -1.0, 3.0, float("-inf"), 1.0, 0.0, 2.0, -2.0])
    out = gpu.prefill_request(1, q[L:].to(CUDA), k[L:].to(CUDA), v[L:].to(CUDA), window_size=(300, 0),
                              sinks=sinks.to(CUDA))
    ref = _reference(q, k, v, L, (300, 0), sinks)
    assert rel_err(out.cpu(), ref) < 2.0 * floor_err(ref) + 1e-6


def test_the_chunk_is_written_as_an_extend_would_on_cuda():
    H, Hk, D, L, n = 8, 2, 64, 300, 70
    (gpu, _), (q, k, v) = _pair(H, Hk, D, L, n, depth=16.0)
    (twin, _), _ = _pair(H, Hk, D, L, n, depth=16.0)
    gpu.prefill_request(1, q[L:].to(CUDA), k[L:].to(CUDA), v[L:].to(CUDA))
    twin.extend(1, k[L:].to(CUDA), v[L:].to(CUDA))
    qs = torch.randn(2, H, D).bfloat16().to(CUDA)
    a = fa.fold_attn_with_kvcache(qs, gpu, return_lse=True)
    b = fa.fold_attn_with_kvcache(qs, twin, return_lse=True)
    assert torch.equal(bits16(a[0]), bits16(b[0])) and torch.equal(bits16(a[1]), bits16(b[1]))


def test_chunk_on_a_pinned_cuda_cache():
    """A cache pinned to a window of 200 whose early pages went back: the history steps take
    windows narrower than the pinned one (the C ABI's [1, pinned]), reading only kept pages."""
    H, Hk, D, L, n = 8, 2, 64, 900, 150
    q, k, v = _data(L + n, H, Hk, D, seed=77)
    caches = []
    for dev in (CUDA, "cpu"):
        c = fa.FoldKVCache(2, H, Hk, D, L + n + 10, page_size=64, device=dev, window_size=(200, 0),
                           num_pages=12)
        c.add_request()
        c.prefill_request(0, q[:L].to(dev), k[:L].to(dev), v[:L].to(dev))
        assert c._forgotten[0] > 0
        caches.append(c)
    gpu, cpu = caches
    hg, lg = history_attention(gpu, 0, q[L:].to(CUDA), 201)
    hc, lc = history_attention(cpu, 0, q[L:], 201)
    assert_matches_cpu(hc, hg.cpu(), lc, lg.cpu(), exact=False)
    out = gpu.prefill_request(0, q[L:].to(CUDA), k[L:].to(CUDA), v[L:].to(CUDA))
    ref = _reference(q, k, v, L, (200, 0))
    assert rel_err(out.cpu(), ref) < 2.0 * floor_err(ref) + 1e-6


@pytest.mark.parametrize("H,Hk,D,n", [(8, 2, 64, 48), (32, 8, 128, 46), (12, 4, 64, 63),
                                      (32, 8, 128, 600)],
                         ids=["G4", "G4-D128-pad", "G3", "G4-D128-38-copies"])
def test_history_in_one_call_equals_one_group_at_a_time_on_cuda(H, Hk, D, n, monkeypatch):
    """The history's groups of one call (copies of the request, a batch view) against calls over
    one group's tokens each: bit for bit on the GPU (a request's step does not depend on the batch
    around it), and within one rounding of the CPU reference; also in calls of a few copies each
    (as a workspace budget splits a long chunk)."""
    L = 700
    (gpu, cpu), (q, _, _) = _pair(H, Hk, D, L, n)
    out, lse = history_attention(gpu, 1, q[L:].to(CUDA), 0)
    (_, _, _, kk), = _runs([0] * n, 64 // (H // Hk))
    groups = list(range(0, n, kk))
    for t0 in groups[:3] + groups[-2:]:
        o, s = history_attention(gpu, 1, q[L + t0:L + min(n, t0 + kk)].to(CUDA), 0)
        assert torch.equal(bits16(o), bits16(out[t0:t0 + kk])) and torch.equal(s, lse[t0:t0 + kk])
    hc, lc = history_attention(cpu, 1, q[L:], 0)
    assert_matches_cpu(hc, out.cpu(), lc, lse.cpu(), exact=False)
    if len(groups) > 5:  # calls of at most five copies (the cap the workspace budget also sets)
        monkeypatch.setattr(fold_attention._history, "_MAX_COPIES", 5)
        o, s = history_attention(gpu, 1, q[L:].to(CUDA), 0)
        assert torch.equal(bits16(o), bits16(out)) and torch.equal(s, lse)
