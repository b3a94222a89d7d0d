"""GPU: calls on memory the current device's kernels cannot use as it is.

- Tensors of a GPU other than the current one (a model split over GPUs in one process, as
  accelerate's device_map does): the library works on the CUDA runtime's current device, so the
  package switches to the tensors' device for each call (before, the decode path launched on
  the current device with the other device's pointers). Each result must equal, bit for bit,
  the same call made with the tensors' device current, and the current device must be left as
  it was.
- The C entry points called directly with such memory, or with pageable host memory: a status
  naming the argument, never a launch that faults.
- The package's stream handle and device scope helpers, on one GPU.
Skipped without a CUDA device or a CUDA build; the two-device tests without a second device."""

from __future__ import annotations

import contextlib

import pytest
import torch

import fold_attention as fa
from helpers import gpu_ready

_READY, _WHY = gpu_ready()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _READY, reason=_WHY)]
two_devices = pytest.mark.skipif(not _READY or torch.cuda.device_count() < 2,
                                 reason="needs two CUDA devices")


@pytest.fixture
def device_zero():
    """cuda:0 current for the test, the caller's current device restored after it."""
    before = torch.cuda.current_device()
    torch.cuda.set_device(0)
    yield
    torch.cuda.set_device(before)


def test_stream_handle_is_torch_current_stream():
    # (Imported here, not at the top: the two-device tests below also run against packages
    # without these helpers, to show what they fix.)
    from fold_attention._device import stream_handle

    dev = torch.device("cuda", torch.cuda.current_device())
    assert stream_handle(dev) == torch.cuda.current_stream(dev).cuda_stream
    side = torch.cuda.Stream(dev)
    with torch.cuda.stream(side):
        assert stream_handle(dev) == side.cuda_stream != 0
        assert stream_handle(torch.device("cuda")) == side.cuda_stream  # (index None: current)


def test_device_scope_switches_only_when_needed():
    from fold_attention._device import device_scope

    here = torch.cuda.current_device()
    # Already current: no torch.cuda.device context at all (the point of the helper).
    assert isinstance(device_scope(torch.device("cuda", here)), contextlib.nullcontext)
    assert isinstance(device_scope(torch.device("cuda")), contextlib.nullcontext)
    if torch.cuda.device_count() > 1:
        other = (here + 1) % torch.cuda.device_count()
        with device_scope(torch.device("cuda", other)):
            assert torch.cuda.current_device() == other
        assert torch.cuda.current_device() == here


def _training(dev, varlen):
    g = torch.Generator().manual_seed(7)
    if varlen:
        lengths = [300, 77, 512]
        T = sum(lengths)
        q, k, v, do = (torch.randn(T, h, 128, generator=g).to(dev, torch.bfloat16) for h in (8, 2, 2, 8))
        cu = torch.tensor([0, 300, 377, 889], dtype=torch.int32, device=dev)
    else:
        q, k, v, do = (torch.randn(2, 333, h, 64, generator=g).to(dev, torch.bfloat16) for h in (8, 4, 4, 8))
    for x in (q, k, v):
        x.requires_grad_(True)
    if varlen:
        out = fa.fold_attn_varlen_func(q, k, v, cu, causal=True)
    else:
        out = fa.fold_attn_func(q, k, v, causal=True)
    grads = torch.autograd.grad(out, (q, k, v), do)
    return [x.detach().cpu() for x in (out, *grads)]


def _training_ops(dev):
    """The backward's pieces called directly on this thread (autograd runs a device's backward
    nodes on a worker thread already switched to that device, so _training alone would not
    show a missing switch in them): fold_attention::bwd and ops.bwd_preprocess."""
    g = torch.Generator().manual_seed(5)
    q, k, v, do = (torch.randn(2, 200, h, 64, generator=g).to(dev, torch.bfloat16) for h in (8, 4, 4, 8))
    out, lse = fa.fold_attn_func(q, k, v, causal=True, return_lse=True)
    lse = lse.permute(1, 0, 2).reshape(8, -1).contiguous()  # (H, B * S): the op's layout
    grads = torch.ops.fold_attention.bwd(q, k, v, out, do, lse, None, 200, True, 0.125)
    delta, bounds = fa.ops.bwd_preprocess(k, v, out, do, causal=True)
    return [x.cpu() for x in (*grads, delta, bounds)]


@two_devices
@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_training_on_another_device(varlen, device_zero):
    other = torch.device("cuda", 1)
    with torch.cuda.device(other):
        want = _training(other, varlen)
    got = _training(other, varlen)  # current device: 0
    assert torch.cuda.current_device() == 0
    for a, b in zip(want, got):
        assert torch.equal(a.view(torch.int16), b.view(torch.int16))
        assert torch.isfinite(b.float()).all()


@two_devices
def test_backward_pieces_on_another_device(device_zero):
    other = torch.device("cuda", 1)
    with torch.cuda.device(other):
        want = _training_ops(other)
    got = _training_ops(other)  # current device: 0
    assert torch.cuda.current_device() == 0
    for a, b in zip(want, got):
        assert a.dtype == b.dtype and torch.equal(a, b)


def _decode(dev, depth):
    g = torch.Generator().manual_seed(11)
    H, Hk, D, lengths = 8, 2, 64, [200, 513]
    T = sum(lengths)
    q, k, v = (torch.randn(T, h, D, generator=g).to(dev, torch.bfloat16) for h in (H, Hk, Hk))
    cu = torch.tensor([0, 200, T], dtype=torch.int32)
    cache = fa.FoldKVCache(2, H, Hk, D, 1024, depth=depth, device=dev)
    first = cache.prefill(q, k, v, cu)
    outs = [first]
    for step in range(3):
        qs, ks, vs = (torch.randn(2, h, D, generator=g).to(dev, torch.bfloat16) for h in (H, Hk, Hk))
        outs += list(fa.fold_attn_with_kvcache(qs, cache, ks, vs, return_lse=True))
    extra = torch.randn(40, H, D, generator=g).to(dev, torch.bfloat16)
    ek, ev = (torch.randn(40, Hk, D, generator=g).to(dev, torch.bfloat16) for _ in range(2))
    outs.append(cache.prefill_request(1, extra, ek, ev))
    return [x.detach().cpu() for x in outs], cache.lengths.tolist()


@two_devices
@pytest.mark.parametrize("depth", [None, 16.0], ids=["dense", "depth16"])
def test_decode_on_another_device(depth, device_zero):
    other = torch.device("cuda", 1)
    with torch.cuda.device(other):
        want, want_len = _decode(other, depth)
    got, got_len = _decode(other, depth)  # current device: 0
    assert torch.cuda.current_device() == 0
    assert got_len == want_len == [203, 556]
    for a, b in zip(want, got):
        assert a.dtype == b.dtype and torch.equal(a, b)
        assert torch.isfinite(b.float()).all()


def test_capture_query_follows_the_device():
    from fold_attention._device import stream_capturing

    here = torch.device("cuda", torch.cuda.current_device())
    assert not stream_capturing(here) and not stream_capturing(torch.device("cpu"))
    graph, x = torch.cuda.CUDAGraph(), torch.zeros(4, device=here)
    with torch.cuda.graph(graph):
        seen = stream_capturing(here), stream_capturing(torch.device("cuda"))
        x += 1
    assert seen == (True, True)


@two_devices
def test_capture_on_another_device(device_zero):
    """A varlen forward captured on cuda:1's stream while cuda:0 is current. torch's capture
    query reads cuda:0's stream (not capturing); the package must ask cuda:1's, or it reads
    cu_seqlens on the host and breaks the capture."""
    from fold_attention._device import stream_capturing

    other = torch.device("cuda", 1)
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(889, h, 128, generator=gen).to(other, torch.bfloat16) for h in (8, 2, 2))
    cu = torch.tensor([0, 300, 377, 889], dtype=torch.int32, device=other)
    with torch.cuda.device(other):
        want = fa.fold_attn_varlen_func(q, k, v, cu, causal=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            with torch.cuda.device(0):
                seen = stream_capturing(other), torch.cuda.is_current_stream_capturing()
                out = fa.fold_attn_varlen_func(q, k, v, cu, causal=True)
    assert seen == (True, False)
    graph.replay()
    torch.cuda.synchronize(other)
    assert torch.cuda.current_device() == 0
    assert torch.equal(out.view(torch.int16), want.view(torch.int16))


def _forward_c_call(q, k, v, stream):
    """fold_fwd_cuda called directly (q may be host memory); returns (status, message)."""
    from fold_attention import _lib
    from fold_attention._bind import fold_tensor, float_ptr, make_problem
    from fold_attention._validate import validate_attention

    dev = k.device
    spec = validate_attention(q.to(dev), k, v, fn="test", varlen=False, causal=True)
    out = torch.empty(q.shape, dtype=q.dtype, device=dev)
    lse = torch.empty(q.shape[2], q.shape[0] * q.shape[1], device=dev)
    args = [fold_tensor(x, False) for x in (q, k, v, out)] + [float_ptr(lse)]
    status = _lib.library().fold_fwd_cuda(make_problem(spec, host=False), *args, stream)
    torch.cuda.synchronize(dev)
    return status, _lib.last_error(), out


def test_c_entry_refuses_pageable_host_memory():
    from fold_attention._device import stream_handle

    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 128, 4, 64, generator=g).to(torch.bfloat16) for _ in range(3))
    k, v = k.cuda(), v.cuda()
    status, message, _ = _forward_c_call(q, k, v, stream_handle(k.device))
    assert status != 0 and "q is not device memory" in message
    # The refusal queued nothing: the next call runs.
    assert torch.isfinite(fa.fold_attn_func(q.cuda(), k, v, causal=True).float()).all()


@two_devices
def test_c_entry_refuses_another_devices_memory_and_stream():
    from fold_attention._device import stream_handle

    torch.cuda.set_device(0)
    q, k, v = (torch.randn(1, 128, 4, 64, device="cuda:1", dtype=torch.bfloat16) for _ in range(3))
    side = torch.cuda.Stream("cuda:1")
    status, message, _ = _forward_c_call(q, k, v, side.cuda_stream)
    assert status != 0 and "stream belongs to device 1 but the current device is 0" in message
    status, message, _ = _forward_c_call(q, k, v, stream_handle(torch.device("cuda", 0)))
    assert status != 0 and "q is memory of device 1 but the current device is 0" in message
