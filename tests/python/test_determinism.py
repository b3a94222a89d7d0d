"""Bit-identical results: repeats, batch composition, packing offset, dense vs varlen.

The "other" requests use a larger input scale than the request under test, so that any
quantity shared across requests (a grid scale, a tile plan) would show in the bits.
"""

import pytest
import torch

import fold_attention as fa

from helpers import (
    HALF_DTYPES,
    DTYPES,
    assert_bitwise_equal,
    cu_from_lengths,
    fold_dense,
    fold_varlen,
    make_dense,
    make_varlen,
)

NAMES = ("out", "lse", "dq", "dk", "dv")


def _assert_all_equal(a, b, where):
    for name, x, y in zip(NAMES, a, b):
        assert_bitwise_equal(x, y, f"{where}: {name}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_repeats_are_bit_identical(causal, dtype):
    q, k, v, dout = make_dense(2, 193, 4, 2, 64, dtype, seed=21)
    first = fold_dense(q, k, v, dout, causal)
    for i in range(2):
        _assert_all_equal(first, fold_dense(q, k, v, dout, causal), f"repeat {i + 1}")

    lengths = [31, 0, 1, 64, 150]
    q, k, v, dout, cu = make_varlen(lengths, 4, 1, 96, dtype, seed=22)
    first = fold_varlen(q, k, v, dout, cu, causal)
    for i in range(2):
        _assert_all_equal(first, fold_varlen(q, k, v, dout, cu, causal), f"varlen repeat {i + 1}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("position", [0, 2])
@pytest.mark.parametrize("H,Hkv,D", [(4, 2, 64), (2, 2, 128), (3, 1, 96)])
@pytest.mark.parametrize("S", [57, 263])  # one tile; several query and key tiles
def test_request_alone_vs_in_dense_batch(S, H, Hkv, D, position, causal, dtype):
    q1, k1, v1, do1 = make_dense(1, S, H, Hkv, D, dtype, seed=31)
    alone = fold_dense(q1, k1, v1, do1, causal)

    qo, ko, vo, doo = make_dense(3, S, H, Hkv, D, dtype, seed=37 + position, scale=3.0)
    for big, small in ((qo, q1), (ko, k1), (vo, v1), (doo, do1)):
        big[position] = small[0]
    batched = fold_dense(qo, ko, vo, doo, causal)

    out, lse, dq, dk, dv = batched
    sliced = (
        out[position : position + 1],
        lse[position : position + 1],
        dq[position : position + 1],
        dk[position : position + 1],
        dv[position : position + 1],
    )
    _assert_all_equal(alone, sliced, f"batch position {position}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("n", [1, 45, 129, 300])
def test_request_alone_vs_packed(n, causal, dtype):
    H, Hkv, D = 4, 2, 64
    q1, k1, v1, do1, cu1 = make_varlen([n], H, Hkv, D, dtype, seed=41)
    alone = fold_varlen(q1, k1, v1, do1, cu1, causal)

    before, after = [13, 0, 70], [5, 1, 140]
    lengths = before + [n] + after
    q, k, v, do, cu = make_varlen(lengths, H, Hkv, D, dtype, seed=43, scale=3.0)
    lo = sum(before)
    sl = slice(lo, lo + n)
    for big, small in ((q, q1), (k, k1), (v, v1), (do, do1)):
        big[sl] = small
    out, lse, dq, dk, dv = fold_varlen(q, k, v, do, cu, causal)
    _assert_all_equal(alone, (out[sl], lse[:, sl], dq[sl], dk[sl], dv[sl]), f"packed at {lo}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(
    "B,S,H,Hkv,D", [(3, 41, 4, 2, 64), (2, 1, 2, 1, 128), (2, 70, 2, 2, 256), (2, 190, 4, 1, 96)]
)
def test_dense_equals_varlen_with_equal_lengths(B, S, H, Hkv, D, causal, dtype):
    q, k, v, dout = make_dense(B, S, H, Hkv, D, dtype, seed=51)
    d_out, d_lse, d_dq, d_dk, d_dv = fold_dense(q, k, v, dout, causal)

    flat = lambda x: x.reshape(B * S, *x.shape[2:])  # noqa: E731
    cu = cu_from_lengths([S] * B)
    v_out, v_lse, v_dq, v_dk, v_dv = fold_varlen(
        flat(q), flat(k), flat(v), flat(dout), cu, causal
    )
    dense_as_packed = (
        flat(d_out),
        d_lse.permute(1, 0, 2).reshape(H, B * S),
        flat(d_dq),
        flat(d_dk),
        flat(d_dv),
    )
    _assert_all_equal(dense_as_packed, (v_out, v_lse, v_dq, v_dk, v_dv), "dense vs varlen")


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
@pytest.mark.parametrize("head_major_q", [False, True], ids=["packed-qkv", "head-major-q"])
def test_strided_views_match_contiguous_bits(head_major_q, dtype):
    """Strided views (passed through, or copied where the library needs it) give the
    contiguous call's bits."""
    B, S, H, Hkv, D = 2, 37, 4, 2, 64
    q, k, v, dout = make_dense(B, S, H, Hkv, D, dtype, seed=61)
    ref = fold_dense(q, k, v, dout, True)

    # FlashAttention's packed GQA layout: (B, S, H + 2 Hkv, D), sliced along heads.
    qkv = torch.cat([q, k, v], dim=2).requires_grad_(True)
    qv, kv, vv = qkv[:, :, :H], qkv[:, :, H : H + Hkv], qkv[:, :, H + Hkv :]
    assert qv.stride(1) == (H + 2 * Hkv) * D and vv.storage_offset() == (H + Hkv) * D
    if head_major_q:
        # (B, H, S, D) storage viewed as (B, S, H, D): copied before the call.
        q_base = q.transpose(1, 2).contiguous().requires_grad_(True)
        qv = q_base.transpose(1, 2)
    # A dout whose token and head strides are swapped (copied before the backward).
    dout_t = dout.transpose(1, 2).contiguous().transpose(1, 2)

    out, lse = fa.fold_attn_func(qv, kv, vv, causal=True, return_lse=True)
    out.backward(dout_t)
    g = qkv.grad
    dq = q_base.grad.transpose(1, 2) if head_major_q else g[:, :, :H]
    if head_major_q:
        assert torch.count_nonzero(g[:, :, :H]) == 0
    got = (out.detach(), lse, dq, g[:, :, H : H + Hkv], g[:, :, H + Hkv :])
    _assert_all_equal(ref, got, "strided views")


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_thread_count_does_not_change_bits(dtype, monkeypatch):
    """The CPU reference's thread count (FOLD_CPU_THREADS) only changes its speed."""
    lengths = [150, 0, 1, 77]
    q, k, v, dout, cu = make_varlen(lengths, 4, 2, 64, dtype, seed=91)
    monkeypatch.setenv("FOLD_CPU_THREADS", "1")
    one = fold_varlen(q, k, v, dout, cu, True)
    monkeypatch.setenv("FOLD_CPU_THREADS", "7")
    seven = fold_varlen(q, k, v, dout, cu, True)
    _assert_all_equal(one, seven, "1 vs 7 threads")
