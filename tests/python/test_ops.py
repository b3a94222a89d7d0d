"""fold_attention.ops.bwd_preprocess on the CPU: Delta and the grid bounds."""

import pytest
import torch

from fold_attention import ops
from helpers import DTYPES, cu_from_lengths, randn


def _torch_preprocess(k, v, out, dout, lengths, H, Hkv):
    """float64 Delta (H, T) and bounds (B, Hkv, 4) computed plainly."""
    group = H // Hkv
    delta = (dout.double() * out.double()).sum(-1).T  # (H, T)
    dnorm = (dout.double() ** 2).sum(-1).sqrt().T  # (H, T): ||dO_i||
    bounds = torch.zeros(len(lengths), Hkv, 4, dtype=torch.float64)
    lo = 0
    for b, n in enumerate(lengths):
        hi = lo + n
        if n:
            for hk in range(Hkv):
                hs = slice(hk * group, (hk + 1) * group)
                bounds[b, hk, 0] = k[lo:hi, hk].double().abs().max()
                bounds[b, hk, 1] = v[lo:hi, hk].double().abs().max()
                bounds[b, hk, 2] = dnorm[hs, lo:hi].max()
                bounds[b, hk, 3] = delta[hs, lo:hi].abs().max()
        lo = hi
    return delta, bounds


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("lengths", [[7, 0, 1, 130], [0], [1, 1]], ids=str)
def test_bwd_preprocess_varlen(lengths, dtype):
    H, Hkv, D = 6, 2, 96
    T = sum(lengths)
    k, v = randn((T, Hkv, D), dtype, 1, 2.0), randn((T, Hkv, D), dtype, 2)
    out, dout = randn((T, H, D), dtype, 3), randn((T, H, D), dtype, 4, 0.5)
    cu = cu_from_lengths(lengths)
    delta, bounds = ops.bwd_preprocess(k, v, out, dout, cu_seqlens=cu)
    assert delta.shape == (H, T) and delta.dtype == torch.float32
    assert bounds.shape == (len(lengths), Hkv, 4) and bounds.dtype == torch.float32
    r_delta, r_bounds = _torch_preprocess(k, v, out, dout, lengths, H, Hkv)
    torch.testing.assert_close(delta.double(), r_delta, rtol=1e-5, atol=1e-5)
    # max |K| and max |V| are exact (maxima of representable values).
    assert torch.equal(bounds[..., :2].double(), r_bounds[..., :2])
    torch.testing.assert_close(bounds[..., 2:].double(), r_bounds[..., 2:], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_bwd_preprocess_dense_equals_varlen(dtype):
    B, S, H, Hkv, D = 3, 21, 4, 1, 64
    k, v = randn((B, S, Hkv, D), dtype, 5), randn((B, S, Hkv, D), dtype, 6)
    out, dout = randn((B, S, H, D), dtype, 7), randn((B, S, H, D), dtype, 8)
    d_delta, d_bounds = ops.bwd_preprocess(k, v, out, dout)
    flat = lambda x: x.reshape(B * S, *x.shape[2:])  # noqa: E731
    v_delta, v_bounds = ops.bwd_preprocess(
        flat(k), flat(v), flat(out), flat(dout), cu_seqlens=cu_from_lengths([S] * B)
    )
    assert torch.equal(d_delta.view(torch.int32), v_delta.view(torch.int32))
    assert torch.equal(d_bounds.view(torch.int32), v_bounds.view(torch.int32))


def test_bwd_preprocess_dense_zero_length():
    k = torch.empty(2, 0, 1, 16)
    out = torch.empty(2, 0, 4, 16)
    delta, bounds = ops.bwd_preprocess(k, k, out, out)
    assert delta.shape == (4, 0) and bounds.shape == (2, 1, 4)
    assert torch.count_nonzero(bounds) == 0
