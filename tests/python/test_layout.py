"""Layouts, edge sizes, autograd plumbing, and that caller tensors are never modified."""

import pytest
import torch

import fold_attention as fa
from helpers import (
    DTYPES,
    assert_bitwise_equal,
    fold_dense,
    fold_varlen,
    make_dense,
    make_varlen,
    randn,
)


def _snapshot(*xs):
    return [x.clone() for x in xs]


def _unchanged(before, after):
    for i, (a, b) in enumerate(zip(before, after)):
        assert_bitwise_equal(a, b, f"input {i}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_inputs_not_modified(dtype):
    q, k, v, dout = make_dense(2, 23, 4, 2, 32, dtype, seed=71)
    for x in (q, k, v):
        x.requires_grad_(True)
    before = _snapshot(q.detach(), k.detach(), v.detach(), dout)
    out = fa.fold_attn_func(q, k, v, causal=True)
    out.backward(dout)
    _unchanged(before, [q.detach(), k.detach(), v.detach(), dout])

    q, k, v, dout, cu = make_varlen([5, 0, 1, 17], 4, 1, 32, dtype, seed=72)
    for x in (q, k, v):
        x.requires_grad_(True)
    before = _snapshot(q.detach(), k.detach(), v.detach(), dout)
    cu_before = cu.clone()
    out = fa.fold_attn_varlen_func(q, k, v, cu, causal=True)
    out.backward(dout)
    _unchanged(before, [q.detach(), k.detach(), v.detach(), dout])
    assert torch.equal(cu, cu_before)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_strided_last_dim_is_copied(dtype):
    """A non-contiguous last dimension is copied (FlashAttention-style), same bits."""
    q, k, v, dout = make_dense(1, 19, 2, 1, 32, dtype, seed=73)
    ref = fold_dense(q, k, v, dout, False)
    # Every other element of a twice-wider tensor.
    q_wide = torch.zeros(1, 19, 2, 64, dtype=dtype)
    q_wide[..., ::2] = q
    q_wide.requires_grad_(True)
    qs = q_wide[..., ::2]
    assert qs.stride(-1) == 2
    kg, vg = k.clone().requires_grad_(True), v.clone().requires_grad_(True)
    out, lse = fa.fold_attn_func(qs, kg, vg, return_lse=True)
    out.backward(dout)
    got = (out.detach(), lse, q_wide.grad[..., ::2], kg.grad, vg.grad)
    for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), ref, got):
        assert_bitwise_equal(a, b, name)
    assert torch.count_nonzero(q_wide.grad[..., 1::2]) == 0


def test_expanded_dout():
    """loss = out.sum() hands backward an expanded (all-zero-stride) dout."""
    q, k, v, _ = make_dense(2, 11, 2, 2, 16, torch.bfloat16, seed=74)
    ref = fold_dense(q, k, v, torch.ones_like(q), True)
    qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))
    fa.fold_attn_func(qg, kg, vg, causal=True).sum().backward()
    for name, a, b in zip(("dq", "dk", "dv"), ref[2:], (qg.grad, kg.grad, vg.grad)):
        assert_bitwise_equal(a, b, name)


def test_partial_requires_grad_and_no_grad():
    q, k, v, dout = make_dense(1, 9, 2, 1, 16, torch.float16, seed=75)
    ref = fold_dense(q, k, v, dout, False)
    kg = k.clone().requires_grad_(True)
    out = fa.fold_attn_func(q, kg, v)
    out.backward(dout)
    assert_bitwise_equal(kg.grad, ref[3], "dk")

    with torch.no_grad():
        out, lse = fa.fold_attn_func(q, k, v, return_lse=True)
    assert not out.requires_grad
    assert_bitwise_equal(out, ref[0], "out under no_grad")


def test_lse_is_not_differentiable():
    q, k, v, _ = make_dense(1, 6, 2, 1, 16, torch.float32, seed=76)
    q.requires_grad_(True)
    out, lse = fa.fold_attn_func(q, k, v, return_lse=True)
    assert out.requires_grad and not lse.requires_grad
    # Using only lse in a loss cannot reach q.
    with pytest.raises(RuntimeError):
        lse.sum().backward()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_all_sequences_empty(dtype):
    H, Hkv, D = 4, 2, 32
    q = torch.empty(0, H, D, dtype=dtype, requires_grad=True)
    k = torch.empty(0, Hkv, D, dtype=dtype, requires_grad=True)
    v = torch.empty(0, Hkv, D, dtype=dtype, requires_grad=True)
    cu = torch.zeros(3, dtype=torch.int32)
    out, lse = fa.fold_attn_varlen_func(q, k, v, cu, causal=True, return_lse=True)
    assert out.shape == (0, H, D) and lse.shape == (H, 0)
    out.sum().backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad.shape == v.shape


def test_dense_zero_length():
    q = torch.empty(2, 0, 4, 16, requires_grad=True)
    k = torch.empty(2, 0, 2, 16, requires_grad=True)
    v = torch.empty(2, 0, 2, 16, requires_grad=True)
    out, lse = fa.fold_attn_func(q, k, v, return_lse=True)
    assert out.shape == q.shape and lse.shape == (2, 4, 0)
    out.sum().backward()
    assert q.grad.shape == q.shape


@pytest.mark.parametrize("causal", [False, True])
def test_single_token_sequences(causal):
    """Length-1 sequences attend to themselves: out == v of the group's KV head."""
    lengths = [1, 1, 0, 1]
    q, k, v, dout, cu = make_varlen(lengths, 4, 2, 16, torch.float32, seed=77)
    out, lse, dq, dk, dv = fold_varlen(q, k, v, dout, cu, causal)
    expect = v.repeat_interleave(2, dim=1)
    assert torch.allclose(out, expect, rtol=0, atol=1e-6)
    scores = (q * k.repeat_interleave(2, dim=1)).sum(-1) / 4.0  # scale 1/sqrt(16)
    assert torch.allclose(lse, scores.T, rtol=1e-5, atol=1e-5)
    assert dq.abs().max() < 1e-5 and dk.abs().max() < 1e-5


def test_max_seqlen_is_an_upper_bound():
    q, k, v, dout, cu = make_varlen([3, 8], 2, 1, 16, torch.bfloat16, seed=78)
    a = fold_varlen(q, k, v, dout, cu, True)
    b = fold_varlen(q, k, v, dout, cu, True, max_seqlen=8)
    c = fold_varlen(q, k, v, dout, cu, True, max_seqlen=4096)
    for name, x, y, z in zip(("out", "lse", "dq", "dk", "dv"), a, b, c):
        assert_bitwise_equal(x, y, name)
        assert_bitwise_equal(x, z, name)


def test_overlapping_kv_views():
    """k/v may be views with a zero batch stride (one KV shared by every request)."""
    B, S = 3, 10
    q = randn((B, S, 2, 16), torch.float32, 79)
    k1 = randn((1, S, 1, 16), torch.float32, 80)
    v1 = randn((1, S, 1, 16), torch.float32, 81)
    out = fa.fold_attn_func(q, k1.expand(B, S, 1, 16), v1.expand(B, S, 1, 16), causal=True)
    ref = fa.fold_attn_func(q, k1.repeat(B, 1, 1, 1), v1.repeat(B, 1, 1, 1), causal=True)
    assert_bitwise_equal(out, ref, "out")


def test_cu_seqlens_host_copy_is_used():
    """A non-contiguous cu_seqlens view is accepted and read correctly."""
    lengths = [4, 0, 6]
    q, k, v, dout, cu = make_varlen(lengths, 2, 2, 16, torch.float32, seed=82)
    cu_strided = torch.stack([cu, torch.full_like(cu, -1)], dim=1)[:, 0]
    assert not cu_strided.is_contiguous()
    a = fa.fold_attn_varlen_func(q, k, v, cu)
    b = fa.fold_attn_varlen_func(q, k, v, cu_strided)
    assert_bitwise_equal(a, b, "out")


def test_abi_layout_passes_through_or_copies():
    """Token-major views go to the library as they are; other layouts are copied."""
    from fold_attention._bind import abi_layout, fold_tensor

    B, S, H, D = 2, 9, 4, 16
    qkv = torch.randn(B, S, 3 * H, D)
    q = qkv[:, :, :H]
    assert abi_layout(q, False) is q
    t = fold_tensor(q, False)
    assert (t.batch_stride, t.token_stride, t.head_stride) == (S * 3 * H * D, 3 * H * D, D)
    assert t.data == q.data_ptr()

    packed = torch.randn(S, 2 * H, 2 * D)[:, :H, D:]  # padded heads, offset dims
    assert abi_layout(packed, True) is packed
    t = fold_tensor(packed, True)
    assert (t.batch_stride, t.token_stride, t.head_stride) == (0, 4 * H * D, 2 * D)

    head_major = torch.randn(B, H, S, D).transpose(1, 2)
    copied = abi_layout(head_major, False)
    assert copied is not head_major and copied.is_contiguous() and torch.equal(copied, head_major)

    expanded = torch.randn(1, S, 1, D).expand(B, S, H, D)
    assert abi_layout(expanded, False).is_contiguous()

    strided_last = torch.randn(B, S, H, 2 * D)[..., ::2]
    assert abi_layout(strided_last, False).is_contiguous()

    # Size-1 dimensions: any stride torch reports is replaced by a packed value.
    one = torch.randn(1, H, 1, D).transpose(1, 2)  # (1, 1, H, D), odd strides on size-1 dims
    assert abi_layout(one, False) is one
    t = fold_tensor(one, False)
    assert (t.token_stride, t.head_stride) == (H * D, D)
