"""GPU: fold_bwd_preprocess_cuda must equal fold_bwd_preprocess_cpu bit for bit.

Skipped without a CUDA device or when the library was built without CUDA.
"""

import pytest
import torch

from fold_attention import ops
from helpers import cu_from_lengths, randn, gpu_ready


_READY, _WHY = gpu_ready()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _READY, reason=_WHY)]


def _bits_equal(a, b):
    assert a.dtype == torch.float32 and b.dtype == torch.float32
    return torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))


def _compare(k, v, out, dout, cu=None):
    dev = torch.device("cuda")
    delta_c, bounds_c = ops.bwd_preprocess(k, v, out, dout, cu_seqlens=cu)
    to = lambda x: None if x is None else x.to(dev)  # noqa: E731
    delta_g, bounds_g = ops.bwd_preprocess(to(k), to(v), to(out), to(dout), cu_seqlens=to(cu))
    torch.cuda.synchronize()
    assert delta_g.device.type == "cuda" and bounds_g.device.type == "cuda"
    assert delta_g.shape == delta_c.shape and bounds_g.shape == bounds_c.shape
    delta_g, bounds_g = delta_g.cpu(), bounds_g.cpu()
    if not _bits_equal(delta_g, delta_c):
        n = (delta_g.view(torch.int32) != delta_c.view(torch.int32)).sum().item()
        raise AssertionError(f"delta: {n} of {delta_c.numel()} values differ in their bits")
    if not _bits_equal(bounds_g, bounds_c):
        raise AssertionError(f"bounds differ:\ncuda {bounds_g}\ncpu  {bounds_c}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("D", [64, 96, 128, 256])
@pytest.mark.parametrize("H,Hkv", [(8, 2), (4, 4), (6, 1)])
def test_preprocess_dense(H, Hkv, D, dtype):
    B, S = 3, 77
    k = randn((B, S, Hkv, D), dtype, 1)
    v = randn((B, S, Hkv, D), dtype, 2)
    out = randn((B, S, H, D), dtype, 3, scale=0.5)
    dout = randn((B, S, H, D), dtype, 4, scale=2.0)
    _compare(k, v, out, dout)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("D", [64, 96, 128, 256])
@pytest.mark.parametrize("lengths", [[0, 1, 130, 7, 0, 255, 1], [1], [300, 0]], ids=str)
def test_preprocess_varlen(lengths, D, dtype):
    H, Hkv = 8, 2
    T = sum(lengths)
    k = randn((T, Hkv, D), dtype, 5)
    v = randn((T, Hkv, D), dtype, 6, scale=3.0)
    out = randn((T, H, D), dtype, 7)
    dout = randn((T, H, D), dtype, 8, scale=0.25)
    _compare(k, v, out, dout, cu_from_lengths(lengths))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_preprocess_strided_inputs(dtype):
    """Packed-QKV-style views (large token strides) on the GPU match the CPU."""
    B, S, H, Hkv, D = 2, 65, 4, 2, 128
    kv = randn((B, S, 2 * Hkv, D), dtype, 9)
    k, v = kv[:, :, :Hkv], kv[:, :, Hkv:]
    out = randn((B, S, H, D), dtype, 10)
    dout = randn((B, S, H, D), dtype, 11)
    _compare(k, v, out, dout)


def test_preprocess_runs_on_current_stream():
    """The op runs on torch's current stream (no implicit sync with the default one)."""
    dtype, H, Hkv, D = torch.bfloat16, 4, 2, 64
    lengths = [5, 0, 33]
    T = sum(lengths)
    k, v = randn((T, Hkv, D), dtype, 12), randn((T, Hkv, D), dtype, 13)
    out, dout = randn((T, H, D), dtype, 14), randn((T, H, D), dtype, 15)
    cu = cu_from_lengths(lengths)
    delta_c, bounds_c = ops.bwd_preprocess(k, v, out, dout, cu_seqlens=cu)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        args = [x.cuda() for x in (k, v, out, dout)]
        delta_g, bounds_g = ops.bwd_preprocess(*args, cu_seqlens=cu.cuda())
    side.synchronize()
    assert _bits_equal(delta_g.cpu(), delta_c) and _bits_equal(bounds_g.cpu(), bounds_c)


@pytest.mark.parametrize("special", ["plain", "zero", "huge", "tiny", "inf"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("D", [64, 96, 128, 256])
def test_preprocess_norm_rare_rows(D, dtype, special):
    """Rows whose sum of squares leaves [2^-64, inf) take the scaled norm (row_reduce.h's
    canonical_norm), on the GPU in a second pass over the block's rows: the bounds must still
    equal the CPU's bit for bit, with such rows among ordinary ones and in some blocks only."""
    if dtype == torch.float16 and special in ("huge", "tiny"):
        pytest.skip("float16 cannot hold values whose squares leave float32's range")
    B, S, H, Hkv = 2, 300, 4, 2
    k = randn((B, S, Hkv, D), dtype, 16)
    v = randn((B, S, Hkv, D), dtype, 17)
    out = randn((B, S, H, D), dtype, 18)
    dout = randn((B, S, H, D), dtype, 19)
    value = {"plain": 1.0, "zero": 0.0, "huge": 1e19, "tiny": 1e-30, "inf": float("inf")}[special]
    # A few rows of request 0 / head 1 (among ordinary rows of their group), and every row of
    # request 1's second KV group (heads 2, 3: its bound is then theirs alone).
    for idx in ((0, slice(5, 9), 1), (1, slice(None), slice(2, 4))):
        dout[idx] = (dout[idx].float() * value).to(dtype) if special != "zero" else 0
    _compare(k, v, out, dout)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("D", [64, 96, 128])
def test_preprocess_norm_rare_rows_varlen(D, dtype):
    """Packed requests: rare rows at a request's end (next to a request of ordinary rows), a
    request of huge rows (bf16) and one of zero rows, subnormal rows: bounds bit for bit."""
    lengths = [70, 0, 129, 1, 300]
    H, Hkv = 6, 2
    T = sum(lengths)
    k = randn((T, Hkv, D), dtype, 20)
    v = randn((T, Hkv, D), dtype, 21)
    out = randn((T, H, D), dtype, 22)
    dout = randn((T, H, D), dtype, 23)
    dout[60:70] = 0  # the end of request 0
    dout[199:200, 0:3] = 0  # request 3 (length 1), KV group 0
    if dtype == torch.bfloat16:
        dout[70:199] = (dout[70:199].float() * 1e19).to(dtype)  # request 2
        dout[200:260, 3:6] = (dout[200:260, 3:6].float() * 1e-40).to(dtype)  # subnormal bf16
    else:
        dout[200:260, 3:6] = (dout[200:260, 3:6].float() * 1e-7).to(dtype)  # subnormal fp16
    _compare(k, v, out, dout, cu_from_lengths(lengths))
