"""Sliding windows (window_size, FlashAttention's convention) on the CPU reference: forward and
gradients against SDPA with the window written out as a mask, per-sequence windows in packed
batches, bit-identity where the window masks nothing, argument errors and torch.compile (the
CUDA kernels' windows: test_gpu_window.py)."""

import pytest
import torch

import fold_attention as fa


def _window_mask(s: int, causal: bool, window) -> torch.Tensor:
    """(s, s) bool, True where query i sees key j, written out from FlashAttention's rule."""
    i = torch.arange(s).unsqueeze(1)
    j = torch.arange(s).unsqueeze(0)
    left, right = window
    keep = torch.ones(s, s, dtype=torch.bool)
    if causal:
        keep &= j <= i
    if left >= 0:
        keep &= j >= i - left
    if right >= 0:
        keep &= j <= i + right
    return keep


def _sdpa(q, k, v, causal, window, scale=None):
    """float64 SDPA with the window as a mask, (B, S, H, D) in and out, GQA expanded."""
    group = q.shape[2] // k.shape[2]
    qt, kt, vt = (x.double().transpose(1, 2) for x in (q, k, v))
    kt, vt = (x.repeat_interleave(group, dim=1) for x in (kt, vt))
    mask = _window_mask(q.shape[1], causal, window)
    out = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, scale=scale)
    return out.transpose(1, 2)


def _inputs(b, s, h, hk, d, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, s, h, d, generator=g).to(dtype)
    k = torch.randn(b, s, hk, d, generator=g).to(dtype)
    v = torch.randn(b, s, hk, d, generator=g).to(dtype)
    return q, k, v


CASES = [
    (True, (20, -1)),
    (True, (0, -1)),  # each query sees its own key only
    (False, (15, 30)),
    (False, (-1, 9)),
    (False, (40, -1)),
    (True, (90, 0)),  # longer than the sequence: masks nothing
]


@pytest.mark.parametrize("causal,window", CASES)
def test_window_matches_sdpa_with_the_mask_written_out(causal, window):
    q, k, v = _inputs(2, 77, 4, 2, 32, seed=1)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    out = fa.fold_attn_func(q, k, v, causal=causal, window_size=window)
    ref = _sdpa(q, k, v, causal, window)
    assert (out.double() - ref).abs().max() < 2e-5
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    ref_grads = torch.autograd.grad(ref, (q, k, v), dout.double())
    for name, g, r in zip("qkv", grads, ref_grads):
        # (relative to dO where the gradient vanishes: a window of one key has dQ = dK = 0)
        err = (g.double() - r).norm() / max(r.norm(), dout.double().norm())
        assert err < 2e-5, (name, float(err))


def test_window_in_bf16_is_within_the_bf16_band():
    q, k, v = _inputs(1, 150, 4, 1, 64, torch.bfloat16, seed=2)
    out = fa.fold_attn_func(q, k, v, causal=True, window_size=(37, 0))
    ref = _sdpa(q, k, v, True, (37, 0))
    floor = (ref.to(torch.bfloat16).double() - ref).norm() / ref.norm()
    assert (out.double() - ref).norm() / ref.norm() < 3 * floor


def test_a_window_that_masks_nothing_changes_no_bit():
    q, k, v = _inputs(2, 40, 2, 2, 16, seed=3)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    for causal, window in ((True, (39, 5)), (False, (39, 39)), (False, (100, -1))):
        plain = fa.fold_attn_func(q, k, v, causal=causal)
        windowed = fa.fold_attn_func(q, k, v, causal=causal, window_size=window)
        assert torch.equal(plain, windowed)
        d = torch.randn_like(plain)
        assert all(torch.equal(a, b) for a, b in zip(torch.autograd.grad(plain, (q, k, v), d),
                                                      torch.autograd.grad(windowed, (q, k, v), d)))


def test_a_window_that_masks_changes_the_result():
    q, k, v = _inputs(1, 40, 2, 2, 16, seed=3)
    plain = fa.fold_attn_func(q, k, v, causal=True)
    windowed = fa.fold_attn_func(q, k, v, causal=True, window_size=(10, 0))
    assert torch.equal(plain[:, :11], windowed[:, :11])  # rows 0..10 see all their keys anyway
    assert not torch.allclose(plain[:, 11:], windowed[:, 11:])


def test_packed_windows_are_each_sequences_own():
    """A window never reaches into the previous sequence: a packed sequence's output and
    gradients are the bits it has alone."""
    lens = [30, 50, 9]
    q, k, v = _inputs(1, sum(lens), 4, 2, 32, seed=4)
    q, k, v = (x[0].requires_grad_() for x in (q, k, v))
    cu = torch.tensor([0, 30, 80, 89], dtype=torch.int32)
    window = (12, -1)
    packed = fa.fold_attn_varlen_func(q, k, v, cu, causal=True, window_size=window)
    d = torch.randn_like(packed)
    pg = torch.autograd.grad(packed, (q, k, v), d)
    for i, (a, b) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        qs, ks, vs = (x.detach()[a:b].unsqueeze(0).requires_grad_() for x in (q, k, v))
        alone = fa.fold_attn_func(qs, ks, vs, causal=True, window_size=window)
        assert torch.equal(alone[0], packed[a:b]), i
        ag = torch.autograd.grad(alone, (qs, ks, vs), d[a:b].unsqueeze(0))
        for x, y in zip(ag, pg):
            assert torch.equal(x[0], y[a:b]), i


def test_window_lse_matches_the_mask():
    q, k, v = _inputs(1, 33, 2, 2, 16, seed=5)
    _, lse = fa.fold_attn_func(q, k, v, causal=False, window_size=(4, 6), return_lse=True)
    mask = _window_mask(33, False, (4, 6))
    s = torch.einsum("bihd,bjhd->bhij", q.double(), k.double()) / 4.0
    ref = torch.logsumexp(s.masked_fill(~mask, float("-inf")), dim=-1)
    assert (lse.double() - ref).abs().max() < 1e-5


@pytest.mark.parametrize(
    "window,exc,match",
    [
        ((-2, 0), ValueError, r"window_size\[0\] must be >= -1"),
        ((0, -5), ValueError, r"window_size\[1\] must be >= -1"),
        ((1, 2, 3), ValueError, "two ints"),
        (5, TypeError, "window_size must be a"),
        (torch.tensor([1, 2]), TypeError, "window_size must be a"),
        ((1.5, 0), TypeError, r"window_size\[0\] must be an int"),
        ((True, 0), TypeError, r"window_size\[0\] must be an int"),
        ((2**31, 0), ValueError, r"window_size\[0\] must be <="),
    ],
)
def test_bad_window_sizes_are_named(window, exc, match):
    q, k, v = _inputs(1, 8, 2, 2, 16)
    with pytest.raises(exc, match=match):
        fa.fold_attn_func(q, k, v, window_size=window)
    with pytest.raises(exc, match=match):
        fa.fold_attn_varlen_func(q[0], k[0], v[0], torch.tensor([0, 8], dtype=torch.int32),
                                 window_size=window)


def test_direct_ops_check_their_window():
    q, k, v = _inputs(1, 8, 2, 2, 16)
    with pytest.raises(ValueError, match="window_before"):
        torch.ops.fold_attention.fwd(q, k, v, None, 8, True, 0.25, -1, 0)
    with pytest.raises(ValueError, match="window_after"):
        torch.ops.fold_attention.fwd(q, k, v, None, 8, False, 0.25, 0, 2**31)


def test_window_under_torch_compile_gives_the_eager_bits():
    q, k, v = _inputs(2, 24, 2, 1, 16, seed=6)

    def f(q, k, v):
        return fa.fold_attn_func(q, k, v, causal=True, window_size=(5, 0))

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    qs = [x.clone().requires_grad_() for x in (q, k, v)]
    qc = [x.clone().requires_grad_() for x in (q, k, v)]
    eager, comp = f(*qs), compiled(*qc)
    assert torch.equal(eager, comp)
    d = torch.randn_like(eager)
    eager.backward(d)
    comp.backward(d)
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(qs, qc))


def test_spec_keeps_the_window_as_given():
    """Only the after side under causal masking is dropped (moot); a side longer than the
    sequence is kept, so the call's kernel path never depends on the batch's lengths."""
    q, k, v = _inputs(1, 10, 2, 2, 16)
    from fold_attention._validate import validate_attention

    spec = validate_attention(q, k, v, fn="f", varlen=False, causal=True, window_size=(99, 4))
    assert (spec.window_before, spec.window_after) == (100, 0)
    spec = validate_attention(q, k, v, fn="f", varlen=False, causal=False, window_size=(8, 3))
    assert (spec.window_before, spec.window_after) == (9, 4)
