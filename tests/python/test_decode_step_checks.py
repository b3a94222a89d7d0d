"""The eager step's input checks (fold_attn_with_kvcache): a non-finite value in q_step, or in
the k_step / v_step rows of an active request, raises ValueError naming the argument (q_step
on the CPU too, where the reference alone said "q row") before anything is appended (the cache's lengths are unchanged);
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
    [("q", float("nan"), "q_step"), ("k", float("inf"), "k_step"), ("v", float("-inf"), "v_step"),
     ("k_last", float("nan"), "k_step")],
)
@pytest.mark.parametrize("precheck", ["1", "0"])
def test_non_finite_input_is_named_and_nothing_is_appended(device, dtype, where, value, arg, precheck,
                                                            monkeypatch):
    # FOLD_DECODE_PRECHECK: on CUDA, "1" (default) tests by one kernel (fold_decode_cuda_precheck),
    # "0" by torch ops; no effect on the CPU.
    monkeypatch.setenv("FOLD_DECODE_PRECHECK", precheck)
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
@pytest.mark.parametrize("precheck", ["1", "0"])
def test_free_rows_are_ignored_and_a_full_request_is_named_first(device, precheck, monkeypatch):
    monkeypatch.setenv("FOLD_DECODE_PRECHECK", precheck)
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


@pytest.mark.parametrize("device", DEVICES)
def test_many_requests(device):
    # 300 slots (more than one block of the precheck kernel's lengths copy), every third free,
    # the others at lengths b % 7 (slot 299 full): the lengths the checks read are the cache's,
    # the full request above slot 256 is named, a non-finite value in the last active request's
    # v row is found, and a clean step appends one token per active request.
    n, dtype, max_len = 300, torch.bfloat16, 64
    c = fa.FoldKVCache(n, 2, 1, D, max_len, depth=16, dtype=dtype, device=device)
    lengths = []
    for b in range(n):
        assert c.add_request() == b
        m = max_len if b == n - 1 else b % 7
        if m:
            c.extend(b, torch.randn(m, 1, D, dtype=dtype, device=device),
                     torch.randn(m, 1, D, dtype=dtype, device=device))
        lengths.append(m)
    for b in range(0, n, 3):
        c.release(b)
        lengths[b] = -1
    assert c.lengths.tolist() == lengths
    if device != "cpu":
        from fold_attention._decode_op import decode_precheck_cuda

        q0 = torch.zeros(n, 2, D, dtype=dtype, device=device)
        assert decode_precheck_cuda(q0, None, None, *c._step_buffers()) == (lengths, 0)
    q = torch.randn(n, 2, D, dtype=dtype, device=device)
    k = torch.randn(n, 1, D, dtype=dtype, device=device)
    v = torch.randn(n, 1, D, dtype=dtype, device=device)
    with pytest.raises(ValueError, match=f"request {n - 1} is full"):
        fa.fold_attn_with_kvcache(q, c, k, v)
    c.release(n - 1)
    lengths[n - 1] = -1
    v[n - 2, 0, D - 1] = float("nan")  # slot 298: the last active one
    with pytest.raises(ValueError, match="v_step"):
        fa.fold_attn_with_kvcache(q, c, k, v)
    v[n - 2, 0, D - 1] = 0.0
    v[0, 0, 0] = float("nan")  # slot 0 is free: ignored
    fa.fold_attn_with_kvcache(q, c, k, v)
    assert c.lengths.tolist() == [m + 1 if m >= 0 else m for m in lengths]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("precheck", ["1", "0"])
def test_non_finite_q_without_an_append(device, precheck, monkeypatch):
    # An attend without k_step / v_step (the precheck's k / v absent): a non-finite q is named.
    monkeypatch.setenv("FOLD_DECODE_PRECHECK", precheck)
    c = _cache(device, torch.float16)
    q, _, _ = _inputs(device, torch.float16)
    q[3, 7, D - 1] = float("inf")  # request 3's row (q is tested in every row)
    with pytest.raises(ValueError, match="q_step"):
        fa.fold_attn_with_kvcache(q, c)
    q[3, 7, D - 1] = 0.0
    fa.fold_attn_with_kvcache(q, c)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("precheck", ["1", "0"])
def test_a_key_whose_rotation_overflows_is_named_and_nothing_is_appended(device, precheck, monkeypatch):
    """bf16 keys are finite up to 3.4e38, but the cache writers sum D of them per rotated
    element in float32: such a k_step row is refused before the append (on CUDA the precheck
    kernel flags |k| >= 2^(127 - log2 D) and the host tests those rows exactly); a large key
    whose rotation fits is appended."""
    monkeypatch.setenv("FOLD_DECODE_PRECHECK", precheck)
    c = _cache(device, torch.bfloat16)
    c.release(3)
    q, k, v = _inputs(device, torch.bfloat16)
    before = c.lengths.tolist()
    k[1, 0, :] = 3e38
    with pytest.raises(ValueError, match="k_step.*too large"):
        fa.fold_attn_with_kvcache(q, c, k, v)
    assert c.lengths.tolist() == before
    k[1, 0, :] = 4e36  # >= 2^121 (flagged at D 64), but 64 x 4e36 < 3.4e38: appended
    out = fa.fold_attn_with_kvcache(q, c, k, v)
    assert c.lengths.tolist() == [n + 1 if n >= 0 else n for n in before]
    assert torch.isfinite(out.float()).all()
