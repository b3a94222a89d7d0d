"""GPU: the forward's K / V bounds for the backward (fold_fwd_cuda_kv_bounds, fwd_train).

A training forward on CUDA also takes max|K| and max|V| per (request, KV head), the bounds the
backward's integer grid needs (ALGORITHMS.md section 5), so that the backward's preprocess
does not read K and V again. Checked here: the bounds are exactly those of a float reference
(canonical NaN included) on every forward path (the v1.2 kernel's scan, the separate pass,
v1 / v1.1, the other epilogue, two CTAs walking every tile), out and lse keep the plain
forward's bits, and the gradients are the same bits with or without the forward's bounds.
"""

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import fold_attention as fa  # noqa: E402
from fold_attention import training  # noqa: E402
from helpers import bits, cu_from_lengths  # noqa: E402

DEV = "cuda"
HALF = (torch.bfloat16, torch.float16)
DIMS = (64, 96, 128, 256)
CANONICAL_NAN = 0x7FFFFFFF


def _randn(shape, dtype, seed, scale=1.0):
    g = torch.Generator(device=DEV)
    g.manual_seed(seed)
    return (torch.randn(shape, generator=g, device=DEV, dtype=torch.float32) * scale).to(dtype)


def _max_abs_bits(x):
    """The bounds' bits of max|x| over a (tokens, D) slice: 0 when empty, canonical NaN."""
    if x.numel() == 0:
        return 0
    a = x.float().abs()
    if torch.isnan(a).any():
        return CANONICAL_NAN
    return int(a.max().view(torch.int32).item())


def _expected(k, v, cu):
    """[batch, n_kv_heads, 4] int32 bits: max|K|, max|V|, then zeros."""
    if cu is None:
        spans = [(b, None) for b in range(k.shape[0])]
    else:
        c = cu.tolist()
        spans = [(slice(c[b], c[b + 1]), None) for b in range(len(c) - 1)]
    hkv = k.shape[-2]
    want = torch.zeros((len(spans), hkv, 4), dtype=torch.int32)
    for i, (sel, _) in enumerate(spans):
        for h in range(hkv):
            want[i, h, 0] = _max_abs_bits(k[sel][..., h, :])
            want[i, h, 1] = _max_abs_bits(v[sel][..., h, :])
    return want


def _fwd_train(q, k, v, causal, cu):
    seqlen = q.shape[1] if cu is None else int((cu[1:] - cu[:-1]).max().item())
    scale = q.shape[-1] ** -0.5
    return training._fwd_train_op(q, k, v, cu, seqlen, causal, scale)


def _fwd_plain(q, k, v, causal, cu):
    with torch.no_grad():
        if cu is None:
            return fa.fold_attn_func(q, k, v, causal=causal, return_lse=True)
        out, lse = fa.fold_attn_varlen_func(q, k, v, cu, causal=causal, return_lse=True)
        return out, lse


def _check(q, k, v, causal, cu, what):
    out, lse, bounds = _fwd_train(q, k, v, causal, cu)
    torch.cuda.synchronize()
    want = _expected(k, v, cu)
    got = bounds.view(torch.int32).cpu()
    if not torch.equal(got, want):
        bad = (got != want).nonzero()[:4].tolist()
        raise AssertionError(f"{what}: bounds differ at {bad}: got {got.flatten()[:8].tolist()}, "
                             f"want {want.flatten()[:8].tolist()}")
    out0, lse0 = _fwd_plain(q, k, v, causal, cu)
    if cu is None:
        lse0 = lse0.permute(1, 0, 2).reshape(lse.shape)
    assert torch.equal(bits(out), bits(out0)), f"{what}: out bits differ from the plain forward"
    assert torch.equal(bits(lse), bits(lse0)), f"{what}: lse bits differ from the plain forward"


PATHS = {
    "scan": {},
    "pass": {"FOLD_FWD_KV_BOUNDS": "pass"},
    "stg": {"FOLD_FWD_EPI": "stg"},
    "v1.1": {"FOLD_FWD_VARIANT": "v1.1"},
    "v1": {"FOLD_FWD_VARIANT": "v1"},
    "2ctas": {"FOLD_FWD_CTAS": "2"},
}


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("D", DIMS)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_forward_bounds_dense(dtype, D, path, monkeypatch):
    for name, value in PATHS[path].items():
        monkeypatch.setenv(name, value)
    for causal, (B, S, H, Hkv), seed in ((True, (3, 333, 4, 4), 1), (False, (2, 517, 6, 2), 2)):
        q = _randn((B, S, H, D), dtype, seed)
        k = _randn((B, S, Hkv, D), dtype, seed + 10, scale=3.0)
        v = _randn((B, S, Hkv, D), dtype, seed + 20, scale=0.5)
        _check(q, k, v, causal, None, f"dense {path} causal={causal} ({B},{S},{H}/{Hkv},{D})")


@pytest.mark.parametrize("path", ["scan", "pass", "2ctas"])
@pytest.mark.parametrize("D", DIMS)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_forward_bounds_varlen(dtype, D, path, monkeypatch):
    """Ragged requests (empty and length-1 ones included): each request's bounds see its own
    keys only, never the next packed request's rows that a TMA box brings in."""
    for name, value in PATHS[path].items():
        monkeypatch.setenv(name, value)
    lengths = [130, 0, 1, 257, 64, 400, 3]
    cu = cu_from_lengths(lengths).to(DEV)
    T, H, Hkv = sum(lengths), 8, 2
    q = _randn((T, H, D), dtype, 30)
    k = _randn((T, Hkv, D), dtype, 31)
    v = _randn((T, Hkv, D), dtype, 32)
    # A large value in a request's first row: its predecessor's tiles must not see it.
    k[cu[3]] = 1000.0
    v[cu[5]] = -500.0
    for causal in (False, True):
        _check(q, k, v, causal, cu, f"varlen {path} causal={causal} D={D}")


@pytest.mark.parametrize("path", ["scan", "pass"])
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_forward_bounds_nonfinite(dtype, path, monkeypatch):
    """inf gives inf's bits, NaN the canonical NaN, and neither leaks to another request."""
    for name, value in PATHS[path].items():
        monkeypatch.setenv(name, value)
    B, S, H, Hkv, D = 3, 200, 4, 2, 128
    q = _randn((B, S, H, D), dtype, 40)
    k = _randn((B, S, Hkv, D), dtype, 41)
    v = _randn((B, S, Hkv, D), dtype, 42)
    k[0, 17, 1, 5] = float("inf")
    v[1, 199, 0, 127] = float("nan")
    k[2, 0, 0, 0] = -float("inf")
    out, lse, bounds = _fwd_train(q, k, v, False, None)
    torch.cuda.synchronize()
    assert torch.equal(bounds.view(torch.int32).cpu(), _expected(k, v, None))


@pytest.mark.parametrize("D", (64, 128))
def test_forward_bounds_strided_views(D):
    """q, k, v as views of one packed qkv tensor: the scan reads the stages the TMA maps fill,
    whatever the strides."""
    B, S, H = 2, 203, 4
    qkv = _randn((B, S, 3, H, D), torch.bfloat16, 50)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    _check(q, k, v, True, None, f"strided D={D}")


def _grads(q, k, v, dout, causal, cu):
    q, k, v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    if cu is None:
        out = fa.fold_attn_func(q, k, v, causal=causal)
    else:
        out = fa.fold_attn_varlen_func(q, k, v, cu, causal=causal)
    out.backward(dout)
    return q.grad, k.grad, v.grad


@pytest.mark.parametrize("D", DIMS)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_gradients_same_bits_with_forward_bounds(dtype, D, monkeypatch):
    """The backward with the forward's bounds (the default on CUDA), with them ignored
    (FOLD_BWD_KV_BOUNDS=0) and without them (FOLD_TRAIN_KV_BOUNDS=0): the same bits."""
    cases = []
    B, S, H, Hkv = 2, 300, 6, 2
    dense = tuple(_randn((B, S, h, D), dtype, 60 + i) for i, h in enumerate((H, Hkv, Hkv, H)))
    cases.append((dense, None))
    lengths = [77, 1, 0, 260]
    cu = cu_from_lengths(lengths).to(DEV)
    T = sum(lengths)
    packed = tuple(_randn((T, h, D), dtype, 70 + i) for i, h in enumerate((H, Hkv, Hkv, H)))
    cases.append((packed, cu))
    for (q, k, v, dout), c in cases:
        for causal in (False, True):
            what = f"{'dense' if c is None else 'varlen'} causal={causal}"
            monkeypatch.delenv("FOLD_BWD_KV_BOUNDS", raising=False)
            monkeypatch.setenv("FOLD_TRAIN_KV_BOUNDS", "1")  # GQA: off by the default rule
            want = _grads(q, k, v, dout, causal, c)
            for name, value in (("FOLD_BWD_KV_BOUNDS", "0"), ("FOLD_TRAIN_KV_BOUNDS", "0")):
                monkeypatch.setenv(name, value)
                got = _grads(q, k, v, dout, causal, c)
                monkeypatch.delenv(name)
                monkeypatch.setenv("FOLD_TRAIN_KV_BOUNDS", "1")
                for g, a, b in zip(("dq", "dk", "dv"), want, got):
                    assert torch.equal(bits(a), bits(b)), f"{what} {name}=0: {g} bits differ"


@pytest.mark.parametrize("route", ["eager", "ops"])
def test_training_forward_takes_bounds_only_when_needed(monkeypatch, route):
    """The forward takes the K / V bounds where autograd will need gradients and the rule says so
    (one query head per KV head at D 64 / 128), not elsewhere (no_grad, inputs without
    requires_grad, KV groups); FOLD_TRAIN_KV_BOUNDS overrides the rule both ways. On both routes
    of an eager call (FOLD_EAGER_AUTOGRAD=0: the custom ops')."""
    if route == "ops":
        monkeypatch.setenv("FOLD_EAGER_AUTOGRAD", "0")
    else:
        monkeypatch.delenv("FOLD_EAGER_AUTOGRAD", raising=False)
    calls = []
    real = training._forward  # (both routes, the eager one and the custom ops', call it)

    def spy(*a, kv_bounds=False, **kw):
        calls.append("train" if kv_bounds else "fwd")
        return real(*a, kv_bounds=kv_bounds, **kw)

    monkeypatch.setattr(training, "_forward", spy)
    q, k, v = (_randn((1, 64, 2, 64), torch.bfloat16, 80 + i) for i in range(3))
    fa.fold_attn_func(q, k, v)
    with torch.no_grad():
        fa.fold_attn_func(q.requires_grad_(True), k, v)
    fa.fold_attn_func(q, k, v)
    monkeypatch.setenv("FOLD_TRAIN_KV_BOUNDS", "0")
    fa.fold_attn_func(q, k, v)
    monkeypatch.delenv("FOLD_TRAIN_KV_BOUNDS")
    kg, vg = k[:, :, :1], v[:, :, :1]  # one KV head for two query heads
    fa.fold_attn_func(q, kg, vg)
    monkeypatch.setenv("FOLD_TRAIN_KV_BOUNDS", "1")
    fa.fold_attn_func(q, kg, vg)
    assert calls == ["fwd", "fwd", "train", "fwd", "fwd", "train"]


def test_bwd_op_checks_kv_bounds():
    q, k, v = (_randn((1, 64, 2, 64), torch.bfloat16, 90 + i) for i in range(3))
    out, lse, bounds = _fwd_train(q, k, v, False, None)
    with pytest.raises(ValueError, match="kv_bounds"):
        training._bwd_op(q, k, v, out, out, lse, None, 64, False, 0.125, bounds[:, :1])
    with pytest.raises(ValueError, match="kv_bounds"):
        training._bwd_op(q, k, v, out, out, lse, None, 64, False, 0.125, bounds.double())


def test_forward_bounds_of_an_empty_batch_are_zeros():
    """Packed requests that are all empty: no kernel runs, the bounds are zeros (not whatever
    the allocator left)."""
    cu = torch.zeros(3, dtype=torch.int32, device=DEV)
    q = torch.empty((0, 4, 64), dtype=torch.bfloat16, device=DEV)
    k = torch.empty((0, 2, 64), dtype=torch.bfloat16, device=DEV)
    junk = torch.full((2, 2, 4), 7.0, device=DEV)  # recycled by the caching allocator
    del junk
    out, lse, bounds = training._fwd_train_op(q, k, k, cu, 1, False, 0.125)
    assert tuple(bounds.shape) == (2, 2, 4)
    assert torch.equal(bounds.cpu(), torch.zeros(2, 2, 4))


@pytest.mark.parametrize("causal", (False, True))
@pytest.mark.parametrize("D", (64, 128))
def test_forward_bounds_every_row_is_scanned(D, causal):
    """The scan's coverage, row by row: one key / value row at a time holds the largest
    magnitude (rows 0, 11, 22, ... of a 600-key request: every key block, its first and last
    rows among them), and the bounds must name it. D 64 has 192-row query blocks over 128-key
    blocks (its three-consumer kernel), D 128 128 over 128."""
    B, S, H, Hkv = 1, 600, 4, 2
    dtype = torch.bfloat16
    q = _randn((B, S, H, D), dtype, 50)
    base_k = _randn((B, S, Hkv, D), dtype, 51)
    base_v = _randn((B, S, Hkv, D), dtype, 52)
    for row in range(0, S, 11):
        k, v = base_k.clone(), base_v.clone()
        k[0, row, row % Hkv, row % D] = 64.0 + row
        v[0, row, (row + 1) % Hkv, (3 * row) % D] = -(32.0 + row)
        _check(q, k, v, causal, None, f"spike at row {row} causal={causal} D={D}")
