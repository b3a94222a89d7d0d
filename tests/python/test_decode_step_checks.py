"""The eager step's input checks (fold_attn_with_kvcache): a non-finite value in q_step, or in
the k_step / v_step rows of an active request, raises ValueError naming the argument (the CPU
reference names q by its row) before anything is appended (the cache's lengths are unchanged);
the rows of free slots are ignored; a full request is named before a non-finite value. On the
CPU reference always, on the GPU where one is ready (where the checks read the device).
"""

from __future__ import annotations

import pytest
import torch

import fold_attention as fa

from helpers import gpu_ready

_READY, _WHY = gpu_ready()
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not _READY, reason=_WHY)])]
B, H, HKV, D = 4, 8, 2, 64


def _cache(device, dtype):
    """Requests 0 (10 tokens), 1 (5 tokens), 3 (at max_len 64); slot 2 free."""
    c = fa.FoldKVCache(B, H, HKV, D, 64, depth=16, dtype=dtype, device=device)
    for b, n in enumerate([10, 5, 0, 64]):
        assert c.add_request() == b
        if n:
            c.extend(b, torch.randn(n, HKV, D, dtype=dtype, device=device),
                     torch.randn(n, HKV, D, dtype=dtype, device=device))
    c.release(2)
    return c


def _inputs(device, dtype):
    g = torch.Generator().manual_seed(5)
    q = torch.randn(B, H, D, generator=g).to(dtype).to(device)
    k = torch.randn(B, HKV, D, generator=g).to(dtype).to(device)
    v = torch.randn(B, HKV, D, generator=g).to(dtype).to(device)
    return q, k, v


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    "where,value,arg",
    [("q", float("nan"), "q_step|q row"), ("k", float("inf"), "k_step"), ("v", float("-inf"), "v_step"),
     ("k_last", float("nan"), "k_step")],
)
def test_non_finite_input_is_named_and_nothing_is_appended(device, dtype, where, value, arg):
    c = _cache(device, dtype)
    c.release(3)  # (no full request here: the finiteness check decides)
    q, k, v = _inputs(device, dtype)
    x = {"q": q, "k": k, "v": v, "k_last": k}[where]
    if where == "q":
        x[1, 3, 5] = value
    elif where == "k":
        x[0, 1, 2] = value
    elif where == "v":
        x[1, 0, 0] = value
    else:
        x[1, HKV - 1, D - 1] = value  # the last element of the last active row
    before = c.lengths.tolist()
    with pytest.raises(ValueError, match=arg):
        fa.fold_attn_with_kvcache(q, c, k, v)
    assert c.lengths.tolist() == before
    # The same inputs made finite again: the step runs and appends one token per active request.
    x.nan_to_num_(0.0, 0.0, 0.0)
    fa.fold_attn_with_kvcache(q, c, k, v)
    assert c.lengths.tolist() == [n + 1 if n >= 0 else n for n in before]


@pytest.mark.parametrize("device", DEVICES)
def test_free_rows_are_ignored_and_a_full_request_is_named_first(device):
    dtype = torch.bfloat16
    c = _cache(device, dtype)
    q, k, v = _inputs(device, dtype)
    k[2, 0, 0] = float("nan")  # slot 2 is free: its rows are ignored
    v[2, 1, 3] = float("inf")
    with pytest.raises(ValueError, match="request 3 is full"):
        fa.fold_attn_with_kvcache(q, c, k, v)
    k[3, 0, 0] = float("nan")  # request 3 is full and its row non-finite: the full request first
    with pytest.raises(ValueError, match="request 3 is full"):
        fa.fold_attn_with_kvcache(q, c, k, v)
    c.release(3)
    out = fa.fold_attn_with_kvcache(q, c, k, v)
    assert c.lengths.tolist() == [11, 6, -1, -1]
    assert torch.isfinite(out.float()).all()
