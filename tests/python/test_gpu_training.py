"""GPU: the CUDA training forward and deterministic backward (fold_fwd_cuda, fold_bwd_cuda).

Accuracy bar, per output (out, dq, dk, dv): the relative Frobenius error against a float64
reference is at most 1.05x that of torch's own SDPA in the same dtype on the same GPU
(cuDNN/flash, with the KV heads repeated) + 1e-5. Determinism and invariance are checked
bit for bit: repeats, a request alone vs inside dense batches of other random requests,
alone vs packed at any offset, dense vs varlen.

Skipped without a CUDA device or when the library was built without CUDA.
"""


import pytest
import torch
import torch.nn.functional as F

import fold_attention as fa
from helpers import gpu_ready

_READY, _WHY = gpu_ready()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _READY, reason=_WHY)]

DEV = "cuda"
HALF = (torch.bfloat16, torch.float16)
DIMS = (64, 96, 128, 256)
HEADS = {"mha": (4, 4), "gqa": (8, 2), "mqa": (6, 1)}
TIME_LIMIT_S = 120  # a hung kernel must not eat the GPU lease


def _randn(shape, dtype, seed, scale=1.0):
    g = torch.Generator(device=DEV)
    g.manual_seed(seed)
    return (torch.randn(shape, generator=g, device=DEV, dtype=torch.float32) * scale).to(dtype)


def _bits(x):
    return x.contiguous().view(torch.int16 if x.element_size() == 2 else torch.int32)


def _assert_bits(a, b, what):
    assert a.shape == b.shape and a.dtype == b.dtype, what
    if not torch.equal(_bits(a), _bits(b)):
        n = (_bits(a) != _bits(b)).sum().item()
        raise AssertionError(f"{what}: {n} of {a.numel()} elements differ in their bits")


def _rel(x, ref):
    ref = ref.double()
    d = (x.double() - ref).norm().item()
    n = ref.norm().item()
    return d / n if n > 0 else d


# ---- references ------------------------------------------------------------------------

def _ref64(q, k, v, dout, causal, scale):
    """float64 out, dq, dk, dv of one dense batch (B, S, H, D)."""
    q, k, v = (x.detach().double().requires_grad_(True) for x in (q, k, v))
    rep = q.shape[2] // k.shape[2]
    kr, vr = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q, kr) * scale
    if causal:
        S = q.shape[1]
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device=DEV).triu(1), float("-inf"))
    p = torch.softmax(s, dim=-1)
    out = torch.einsum("bhij,bjhd->bihd", p, vr)
    out.backward(dout.double())
    return out.detach(), q.grad, k.grad, v.grad


def _sdpa(q, k, v, dout, causal, scale):
    """torch SDPA in the inputs' dtype (KV heads repeated): out, dq, dk, dv."""
    q, k, v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    rep = q.shape[2] // k.shape[2]
    kr, vr = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), kr.transpose(1, 2), vr.transpose(1, 2), is_causal=causal, scale=scale
    ).transpose(1, 2)
    out.backward(dout)
    return out.detach(), q.grad, k.grad, v.grad


def _fold(q, k, v, dout, causal, cu=None):
    """fold out, lse, dq, dk, dv (dense or packed)."""
    q, k, v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    if cu is None:
        out, lse = fa.fold_attn_func(q, k, v, causal=causal, return_lse=True)
    else:
        out, lse = fa.fold_attn_varlen_func(q, k, v, cu, causal=causal, return_lse=True)
    out.backward(dout)
    return out.detach(), lse, q.grad, k.grad, v.grad


def _per_sequence(fn, q, k, v, dout, cu, causal, scale):
    """Runs a dense reference on each packed sequence; packed out, dq, dk, dv."""
    outs = [torch.zeros(x.shape, dtype=x.dtype if fn is _sdpa else torch.float64, device=DEV)
            for x in (q, q, k, v)]
    cu = cu.tolist()
    for b in range(len(cu) - 1):
        lo, hi = cu[b], cu[b + 1]
        if hi == lo:
            continue
        res = fn(q[lo:hi][None], k[lo:hi][None], v[lo:hi][None], dout[lo:hi][None], causal, scale)
        for o, r in zip(outs, res):
            o[lo:hi] = r[0]
    return outs


def _check_bar(fold_res, sdpa_res, ref_res, what):
    for name, x, s, r in zip(("out", "dq", "dk", "dv"), fold_res, sdpa_res, ref_res):
        assert torch.isfinite(x).all(), f"{what} {name}: non-finite values"
        e_fold, e_sdpa = _rel(x, r), _rel(s, r)
        assert e_fold <= 1.05 * e_sdpa + 1e-5, (
            f"{what} {name}: error {e_fold:.3e} > 1.05 x SDPA's {e_sdpa:.3e} + 1e-5"
        )


def _cu(lengths):
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    return torch.tensor(cu, dtype=torch.int32, device=DEV)


# ---- accuracy ------------------------------------------------------------------------------

@pytest.mark.parametrize("heads", list(HEADS), ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("D", DIMS)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_accuracy_dense(dtype, D, causal, heads):
    H, Hkv = HEADS[heads]
    B, S = 2, 200
    q = _randn((B, S, H, D), dtype, 1)
    k = _randn((B, S, Hkv, D), dtype, 2)
    v = _randn((B, S, Hkv, D), dtype, 3)
    dout = _randn((B, S, H, D), dtype, 4)
    scale = D**-0.5
    out, lse, dq, dk, dv = _fold(q, k, v, dout, causal)
    assert lse.shape == (B, H, S) and lse.dtype == torch.float32
    ref = _ref64(q, k, v, dout, causal, scale)
    _check_bar((out, dq, dk, dv), _sdpa(q, k, v, dout, causal, scale), ref, f"{dtype} D={D}")
    # The natural-log LSE of every row.
    rep = H // Hkv
    s = torch.einsum("bihd,bjhd->bhij", q.double(), k.double().repeat_interleave(rep, 2)) * scale
    if causal:
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device=DEV).triu(1), float("-inf"))
    assert torch.allclose(lse.double(), torch.logsumexp(s, -1), atol=1e-3, rtol=0)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("D", DIMS)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_accuracy_varlen(dtype, D, causal):
    H, Hkv = 8, 2
    lengths = [1, 7, 0, 200, 1000]
    T = sum(lengths)
    cu = _cu(lengths)
    q = _randn((T, H, D), dtype, 5)
    k = _randn((T, Hkv, D), dtype, 6)
    v = _randn((T, Hkv, D), dtype, 7)
    dout = _randn((T, H, D), dtype, 8)
    scale = D**-0.5
    out, lse, dq, dk, dv = _fold(q, k, v, dout, causal, cu)
    assert lse.shape == (H, T)
    ref = _per_sequence(_ref64, q, k, v, dout, cu, causal, scale)
    sdpa = _per_sequence(_sdpa, q, k, v, dout, cu, causal, scale)
    _check_bar((out, dq, dk, dv), sdpa, ref, f"varlen {dtype} D={D}")


def _check_finite_within_bar(q, k, v, dout, what):
    """Causal fold gradients of extreme inputs: finite, and within 1.05x SDPA's error + 1e-5 of
    float64 (1e-2 where SDPA itself is not finite)."""
    scale = q.shape[-1] ** -0.5
    res = _fold(q, k, v, dout, True)
    ref = _ref64(q, k, v, dout, True, scale)
    sdpa = _sdpa(q, k, v, dout, True, scale)
    for name, x, s, r in zip(("out", "dq", "dk", "dv"), (res[0],) + res[2:], sdpa, ref):
        assert torch.isfinite(x).all(), f"{name}: inf/NaN {what}"
        bar = 1.05 * _rel(s, r) + 1e-5 if torch.isfinite(s).all() else 1e-2
        assert _rel(x, r) <= bar, f"{name}: error {_rel(x, r):.3e} above {bar:.3e}"


@pytest.mark.parametrize("D", [64, 128])
def test_fp16_large_dout_stays_finite(D):
    """fp16 with a large dO: dS is carried as dS * 2^t < 2^14, so nothing overflows."""
    dtype, B, S, H, Hkv = torch.float16, 2, 300, 8, 2
    q = _randn((B, S, H, D), dtype, 9, scale=2.0)
    k = _randn((B, S, Hkv, D), dtype, 10, scale=2.0)
    v = _randn((B, S, Hkv, D), dtype, 11)
    dout = _randn((B, S, H, D), dtype, 12, scale=200.0)
    _check_finite_within_bar(q, k, v, dout, "with a large dO")


@pytest.mark.parametrize(
    "what,mult", [("dout", 1e19), ("dout", 1e30), ("dout", 1e-25), ("v", 1e-33)],
    ids=lambda x: f"{x:g}" if isinstance(x, float) else x)
def test_bf16_extreme_scales_keep_gradients(what, mult):
    """bf16 has float32's exponent range. dO ~ 1e19 made the grid bound max ||dO||^2 overflow
    (NaN gradients until session 32: the bound is now ||dO||, computed scaled); V ~ 1e-33 needs
    the grid's s beyond 100 (dQ was 0 until session 32)."""
    dtype, B, S, H, Hkv, D = torch.bfloat16, 2, 256, 8, 2, 128
    q = _randn((B, S, H, D), dtype, 13)
    k = _randn((B, S, Hkv, D), dtype, 14)
    v = _randn((B, S, Hkv, D), dtype, 15, scale=mult if what == "v" else 1.0)
    dout = _randn((B, S, H, D), dtype, 16, scale=mult if what == "dout" else 1.0)
    _check_finite_within_bar(q, k, v, dout, "")


def test_empty_and_unsupported():
    q = torch.zeros((0, 4, 64), dtype=torch.bfloat16, device=DEV)
    k = torch.zeros((0, 2, 64), dtype=torch.bfloat16, device=DEV)
    out = fa.fold_attn_varlen_func(q, k, k, _cu([0, 0]))
    assert out.shape == q.shape
    q, k = (torch.zeros((1, 8, 2, 80), dtype=torch.bfloat16, device=DEV) for _ in range(2))
    with pytest.raises(NotImplementedError, match="head_dim"):
        fa.fold_attn_func(q, k, k)
    q, k = (torch.zeros((1, 8, 2, 64), dtype=torch.float32, device=DEV) for _ in range(2))
    with pytest.raises(NotImplementedError, match="float32"):
        fa.fold_attn_func(q, k, k)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("D", (64, 96, 128))
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_backward_v1_agrees_with_v0(dtype, D, causal, monkeypatch):
    """Diagnostic: the wgmma main kernel (v1) and the mma.sync one (v0, FOLD_BWD_V0=1) compute
    the same sums in different fp32 orders; their gradients agree to well under the bar."""
    B, S, H, Hkv = 2, 333, 8, 2
    args = _dense_case(dtype, B, S, H, Hkv, D, 90)
    v1 = _fold(*args, causal)
    monkeypatch.setenv("FOLD_BWD_V0", "1")
    v0 = _fold(*args, causal)
    monkeypatch.delenv("FOLD_BWD_V0")
    for name, a, b in zip(("dq", "dk", "dv"), v1[2:], v0[2:]):
        assert torch.isfinite(a).all(), f"v1 {name}: non-finite values"
        assert _rel(a, b) < 1e-2, f"v1 {name} vs v0: relative difference {_rel(a, b):.3e}"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("D", (64, 96, 128))
def test_backward_schedule_does_not_change_bits(D, causal, monkeypatch):
    """v1.1 schedules the CTAs in chunks of KV head x request (FOLD_BWD_HB_CHUNK sets the
    chunk, FOLD_BWD_VARIANT=v1 restores v1's single chunk): the order of the CTAs must not
    change a bit of dq, dk, dv (dense and varlen, short last chunks included). Nor must the
    main kernel's form: FOLD_BWD_VARIANT=ws (warp-specialised) and sync (CTA-synchronous)
    force one at every head dim (the default takes ws at D 96 / 128, sync at D 64); wsd is ws with
    dV / dK issued before the dQ product (the default issues dQ first); pin0 packs P twice (the
    pin's form before session 17: the default packs P's fragments once, in front of dP^T's
    wait); epi0 stores dK / dV 4 bytes at a time from the accumulators (the default stages
    them in shared memory and stores 16 bytes per lane)."""
    dtype = torch.bfloat16
    B, S, H, Hkv = 5, 700, 6, 3  # 15 KV head x request items: chunks of 1, 2, 4, 7, 15
    args = _dense_case(dtype, B, S, H, Hkv, D, 91)
    monkeypatch.delenv("FOLD_BWD_HB_CHUNK", raising=False)
    monkeypatch.delenv("FOLD_BWD_VARIANT", raising=False)
    ref = _fold(*args, causal)
    lens = [700, 1, 129, 300, 513]
    cu = _cu(lens)
    packed = [torch.cat([x[i, :n] for i, n in enumerate(lens)]) for x in args]
    ref_v = _fold(*packed, causal, cu)
    settings = [("FOLD_BWD_VARIANT", v) for v in ("v1", "ws", "sync", "wsd", "pin0", "epi0")]
    settings += [("FOLD_BWD_HB_CHUNK", c) for c in "12479"]
    for var, value in settings:
        monkeypatch.setenv(var, value)
        got = _fold(*args, causal)
        got_v = _fold(*packed, causal, cu)
        monkeypatch.delenv(var)
        for name, a, b in zip(("dq", "dk", "dv"), got[2:], ref[2:]):
            _assert_bits(a, b, f"{var}={value} dense {name}")
        for name, a, b in zip(("dq", "dk", "dv"), got_v[2:], ref_v[2:]):
            _assert_bits(a, b, f"{var}={value} varlen {name}")


def _bwd_into(q, k, v, dout, causal, dk, dv):
    """fold_bwd_cuda (dense) with the caller's dk, dv views as outputs; dq, dk, dv."""
    from fold_attention import _lib, training
    from fold_attention._bind import float_ptr, fold_tensor, make_problem

    S, scale = q.shape[1], 1.0 / q.shape[-1] ** 0.5
    spec = training._spec_of(q, k, v, None, S, causal, scale)
    out, lse = training._fwd_op(q, k, v, None, S, causal, scale)
    dq = torch.empty_like(q)
    lib = _lib.library()
    problem = make_problem(spec, host=False)
    size = int(lib.fold_bwd_cuda_workspace_size(problem))
    workspace = torch.empty(max(size, 1), dtype=torch.uint8, device=DEV)
    args = ([fold_tensor(x, False) for x in (q, k, v, out, dout)] + [float_ptr(lse)]
            + [fold_tensor(x, False) for x in (dq, dk, dv)])
    status = lib.fold_bwd_cuda(problem, *args, workspace.data_ptr(), size,
                               torch.cuda.current_stream().cuda_stream)
    _lib.check(status, "fold_bwd_cuda")
    torch.cuda.synchronize()
    return dq, dk, dv


@pytest.mark.parametrize("D", (64, 96, 128))
def test_backward_refuses_unaligned_dk_dv(D):
    """The default epilogue stores dK / dV 16 bytes at a time: a dK / dV view 8 bytes past a
    16-byte boundary is refused by the C entry point with an error naming it, before any kernel
    runs (nothing is written)."""
    q, k, v, dout = _dense_case(torch.bfloat16, 2, 300, 4, 2, D, 131)
    bufs = [torch.zeros(k.numel() + 4, dtype=k.dtype, device=DEV) for _ in range(2)]
    dk, dv = (b[4:].view(k.shape) for b in bufs)
    assert dk.data_ptr() % 16 == 8 and dv.data_ptr() % 16 == 8
    with pytest.raises(NotImplementedError, match="dk: data must be 16-byte aligned"):
        _bwd_into(q, k, v, dout, True, dk, dv)
    assert not bufs[0].any() and not bufs[1].any()


# ---- determinism and invariance -------------------------------------------------------------

@pytest.mark.parametrize("D", DIMS)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_repeats_are_bit_identical(dtype, D):
    B, S, H, Hkv = 2, 517, 8, 2
    q = _randn((B, S, H, D), dtype, 13)
    k = _randn((B, S, Hkv, D), dtype, 14)
    v = _randn((B, S, Hkv, D), dtype, 15)
    dout = _randn((B, S, H, D), dtype, 16)
    first = _fold(q, k, v, dout, True)
    for _ in range(10):
        again = _fold(q, k, v, dout, True)
        for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), first, again):
            _assert_bits(a, b, f"repeat {name}")


@pytest.mark.parametrize("D", DIMS)
def test_backward_on_dirty_memory_equals_clean(D):
    """The dQ grid is zeroed by the preprocess, not by a memset of the workspace: a backward
    whose workspace comes from memory full of 0x7f bytes (2139062143 in every int32 grid
    word, were a row not zeroed) gives the bits of one run on emptied memory; dense and varlen
    (an empty request, one-token and partial-block requests), causal and full."""
    dtype = torch.bfloat16
    lengths, H, Hkv = [700, 0, 129, 64, 1], 8, 2
    T = sum(lengths)
    packed = [_randn((T, h, D), dtype, 190 + i) for i, h in enumerate((H, Hkv, Hkv, H))]
    dense = _dense_case(dtype, 2, 300, H, Hkv, D, 200)
    grid_bytes = 4 * max(T, 600) * H * D  # the larger of the two problems' int32 grids
    for causal in (False, True):
        torch.cuda.empty_cache()
        expect = (_fold(*packed, causal, _cu(lengths)), _fold(*dense, causal))
        got = []
        for case, cu in ((packed, _cu(lengths)), (dense, None)):
            _poison_allocator(4 * grid_bytes, 2 * grid_bytes, grid_bytes, byte=0x7F)
            got.append(_fold(*case, causal, cu))
        for kind, a, b in zip(("varlen", "dense"), expect, got):
            for name, x, y in zip(("out", "lse", "dq", "dk", "dv"), a, b):
                _assert_bits(x, y, f"{kind} {name} on dirty memory (causal={causal})")


def _dense_case(dtype, B, S, H, Hkv, D, seed):
    return (_randn((B, S, H, D), dtype, seed), _randn((B, S, Hkv, D), dtype, seed + 1),
            _randn((B, S, Hkv, D), dtype, seed + 2), _randn((B, S, H, D), dtype, seed + 3))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("D", DIMS)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_request_alone_equals_request_in_dense_batch(dtype, D, causal):
    S, H, Hkv = 333, 8, 2
    one = _dense_case(dtype, 1, S, H, Hkv, D, 20)
    alone = _fold(*one, causal)
    for B, pos, seed in ((3, 1, 30), (8, 5, 40)):
        batch = [x.clone() for x in _dense_case(dtype, B, S, H, Hkv, D, seed)]
        for x, y in zip(batch, one):
            x[pos] = y[0]
        res = _fold(*batch, causal)
        for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), alone, res):
            _assert_bits(a[0], b[pos], f"B={B} {name}")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("D", DIMS)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_request_alone_equals_request_packed(dtype, D, causal):
    L, H, Hkv = 300, 8, 2
    q, k, v, dout = (x[0] for x in _dense_case(dtype, 1, L, H, Hkv, D, 50))
    alone = _fold(q, k, v, dout, causal, _cu([L]))
    for lengths, pos, seed in (([13, L, 250], 1, 60), ([L, 1, 129], 0, 70), ([5, 0, 77, L], 3, 80)):
        T = sum(lengths)
        packed = [_randn((T,) + x.shape[1:], dtype, seed + i) for i, x in enumerate((q, k, v, dout))]
        lo = sum(lengths[:pos])
        for x, y in zip(packed, (q, k, v, dout)):
            x[lo:lo + L] = y
        res = _fold(*packed, causal, _cu(lengths))
        for name, a, b in zip(("out", "dq", "dk", "dv"), alone[:1] + alone[2:], res[:1] + res[2:]):
            _assert_bits(a, b[lo:lo + L], f"packed at {lo} {name}")
        _assert_bits(alone[1], res[1][:, lo:lo + L], f"packed at {lo} lse")


@pytest.mark.parametrize("D", DIMS)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_dense_equals_varlen(dtype, D):
    B, S, H, Hkv = 3, 190, 6, 1
    case = _dense_case(dtype, B, S, H, Hkv, D, 90)
    dense = _fold(*case, True)
    flat = [x.reshape((B * S,) + x.shape[2:]) for x in case]
    packed = _fold(*flat, True, _cu([S] * B))
    for name, a, b in zip(("out", "dq", "dk", "dv"), dense[:1] + dense[2:], packed[:1] + packed[2:]):
        _assert_bits(a.reshape(b.shape), b, f"dense vs varlen {name}")
    _assert_bits(dense[1].permute(1, 0, 2).reshape(H, B * S), packed[1], "dense vs varlen lse")


def _fwd(q, k, v, causal, cu=None):
    """fold out, lse of the forward alone (no autograd)."""
    with torch.no_grad():
        if cu is None:
            return fa.fold_attn_func(q, k, v, causal=causal, return_lse=True)
        return fa.fold_attn_varlen_func(q, k, v, cu, causal=causal, return_lse=True)


@pytest.mark.parametrize("D", DIMS)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_forward_strided_views_equal_contiguous(dtype, D):
    """q, k, v as views into one packed qkv tensor (token stride 3 H D, passed through without
    a copy): the TMA maps take those strides; the bits equal the contiguous inputs'."""
    B, S, H = 2, 203, 4
    qkv = _randn((B, S, 3, H, D), dtype, 110)
    q, k, v = qkv.unbind(dim=2)
    assert q.stride(1) == 3 * H * D
    for causal in (False, True):
        got = _fwd(q, k, v, causal)
        expect = _fwd(q.contiguous(), k.contiguous(), v.contiguous(), causal)
        _assert_bits(got[0], expect[0], "strided out")
        _assert_bits(got[1], expect[1], "strided lse")


@pytest.mark.parametrize("D", DIMS)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_forward_nonfinite_neighbour_does_not_leak(dtype, D):
    """The forward's tiles of a request reach into the next packed request (TMA boxes past the
    end); inf/NaN there must contribute exactly nothing (masked scores, zeroed V rows)."""
    L, H, Hkv = 70, 4, 2
    q, k, v, _ = (x[0] for x in _dense_case(dtype, 1, L, H, Hkv, D, 120))
    lengths = [L, 100]
    packed = [_randn((sum(lengths),) + x.shape[1:], dtype, 130 + i) for i, x in enumerate((q, k, v))]
    for x, y in zip(packed, (q, k, v)):
        x[:L] = y
    packed[1][L:L + 64] = float("inf")
    packed[2][L:L + 32] = float("inf")
    packed[2][L + 32:L + 64] = float("nan")
    for causal in (False, True):
        alone = _fwd(q, k, v, causal, _cu([L]))
        res = _fwd(*packed, causal, _cu(lengths))
        assert torch.isfinite(res[0][:L]).all(), "non-finite values leaked into the request"
        _assert_bits(alone[0], res[0][:L], "neighbour out")
        _assert_bits(alone[1], res[1][:, :L], "neighbour lse")


@pytest.mark.parametrize("D", DIMS)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_forward_variants_agree_bitwise(dtype, D, monkeypatch):
    """FOLD_FWD_VARIANT picks the forward kernel (v1; v1.1 = softmax overlapped with the
    GEMMs, ping-pong, 3 stages, longest-first grid; v1.1-nopp without the ping-pong; v1.2 =
    v1.1 persistent, also with FOLD_FWD_CTAS = 1 and 3 so that a few CTAs walk every tile and
    carry the pipeline state across tiles; v1.2-2wg = v1.2 with two consumer warpgroups at
    D 64). Same tiles and the same order of operations: the same bits, except that at D 64
    v1.2 (the default) runs three consumer warpgroups on 192 x 128 tiles, whose bits are its own
    (the same with 1, 3 or all CTAs). Lengths cover one key block (ping-pong turns of a single
    block), several pipeline wraps, partial last blocks, an empty request and idle tiles
    (seqlen bound)."""
    lengths, H, Hkv = [700, 1, 130, 257, 0, 513, 64], 8, 2
    T = sum(lengths)
    q, k, v = (_randn((T, h, D), dtype, 140 + i) for i, h in enumerate((H, Hkv, Hkv)))
    cu = _cu(lengths)
    dense = [_randn((2, 600, h, D), dtype, 150 + i) for i, h in enumerate((H, Hkv, Hkv))]
    own = ("v1.2", "v1.2/1", "v1.2/3", "default") if D == 64 else ()
    for causal in (False, True):
        got = {}
        for variant in ("v1", "v1.1", "v1.1-nopp", "v1.2", "v1.2/1", "v1.2/3", "v1.2-2wg",
                        "v1.2-2wg/3"):
            name, _, ctas = variant.partition("/")
            monkeypatch.setenv("FOLD_FWD_VARIANT", name)
            if ctas:
                monkeypatch.setenv("FOLD_FWD_CTAS", ctas)
            got[variant] = (_fwd(q, k, v, causal, cu), _fwd(*dense, causal))
            monkeypatch.delenv("FOLD_FWD_CTAS", raising=False)
        monkeypatch.delenv("FOLD_FWD_VARIANT")
        got["default"] = (_fwd(q, k, v, causal, cu), _fwd(*dense, causal))
        for variant, res in got.items():
            base = "v1.2" if variant in own else "v1"
            for (a_out, a_lse), (b_out, b_lse), kind in zip(got[base], res, ("varlen", "dense")):
                _assert_bits(a_out, b_out, f"{variant} vs {base} {kind} out (causal={causal})")
                _assert_bits(a_lse, b_lse, f"{variant} vs {base} {kind} lse (causal={causal})")


def _setting_keeps_bits(monkeypatch, name, base, runs, lengths, dense_len, dtype, D, seed, bad):
    """The forward with FOLD setting `name` = `base` against each (value, CTAs) of `runs` ("" =
    unset / all CTAs): the same bits, varlen over `lengths` and dense (2, dense_len), causal or
    not, with NaN left in the outputs' memory beforehand; `bad` refused naming the setting."""
    H, Hkv, T = 6, 2, sum(lengths)
    q, k, v = (_randn((T, h, D), dtype, seed + i) for i, h in enumerate((H, Hkv, Hkv)))
    cu = _cu(lengths)
    dense = [_randn((2, dense_len, h, D), dtype, seed + 10 + i) for i, h in enumerate((H, Hkv, Hkv))]
    for causal in (False, True):
        monkeypatch.setenv(name, base)
        expect = (_fwd(q, k, v, causal, cu), _fwd(*dense, causal))
        for value, ctas in runs:
            monkeypatch.delenv(name, raising=False)
            if value:
                monkeypatch.setenv(name, value)
            if ctas:
                monkeypatch.setenv("FOLD_FWD_CTAS", ctas)
            got = (_fwd_on_poison(q, k, v, causal, cu), _fwd_on_poison(*dense, causal))
            monkeypatch.delenv("FOLD_FWD_CTAS", raising=False)
            for (a_out, a_lse), (b_out, b_lse), kind in zip(expect, got, ("varlen", "dense")):
                what = f"{name} {value or 'default'}, {ctas or 'all'} CTAs, {kind} (causal={causal})"
                _assert_bits(a_out, b_out, f"{what} out")
                _assert_bits(a_lse, b_lse, f"{what} lse")
    monkeypatch.setenv(name, bad)
    with pytest.raises(ValueError, match=name):
        _fwd(*dense, False)


@pytest.mark.parametrize("D", DIMS)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_forward_trim_keeps_bits(dtype, D, monkeypatch):
    """v1.2's trim (on by default; FOLD_FWD_TRIM=0 turns it off): it skips a consumer
    warpgroup's work where all its 64 rows lie past its request's end, and multiplies P V over
    half of a last key block with at most half its keys in range (the skipped terms are exact
    zeros). Same bits as without (default and =1), with 1, 3 and all CTAs, dense and varlen,
    causal or not, lengths around the tiles (64 / 128 / 192 rows and 128 / 192 keys) and an
    empty request; a bad value is refused with a message naming it."""
    _setting_keeps_bits(monkeypatch, "FOLD_FWD_TRIM", "0",
                        (("", ""), ("1", ""), ("", "1"), ("1", "3")),
                        [700, 1, 130, 257, 0, 513, 64, 65, 191, 193, 320, 127], 320, dtype, D, 260,
                        "2")


@pytest.mark.parametrize("D", DIMS)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_forward_epilogue_keeps_bits(dtype, D, monkeypatch):
    """v1.2's epilogue (FOLD_FWD_EPI): "shf" (the default) transposes the packed column pairs
    across each quad of lanes and stores 16 bytes per lane, "stg" stores 4 bytes per lane from
    the accumulator layout. Same bits, with 1, 3 and all CTAs, dense (rows past a request's end
    in its last tile) and varlen (a last tile's rows past the end belong to the next request:
    never written by this one), causal or not, with NaN left in the outputs' memory beforehand;
    a bad value is refused with a message naming it."""
    _setting_keeps_bits(monkeypatch, "FOLD_FWD_EPI", "stg", (("", ""), ("shf", "1"), ("", "3")),
                        [700, 1, 130, 257, 0, 513, 64, 65, 191, 193, 320, 127, 16, 17], 203, dtype,
                        D, 280, "smem")


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_forward_d64_three_consumers(dtype, monkeypatch):
    """At D 64 the default forward (v1.2 with three consumer warpgroups, 192 x 128 tiles) keeps
    the plan's invariances: a request alone, packed among others and as a row of a dense batch
    gives the same bits, whatever the number of CTAs; lengths around the 192-row tiles (191, 192,
    193) and the 128-key blocks; its error against float64 stays within 1.05x that of the
    two-warpgroup form (v1.2-2wg, 128 x 192 tiles) + 1e-5."""
    D, H, Hkv = 64, 6, 2
    lengths = [700, 1, 130, 257, 0, 513, 64, 193, 192, 191]
    T = sum(lengths)
    q, k, v = (_randn((T, h, D), dtype, 240 + i) for i, h in enumerate((H, Hkv, Hkv)))
    cu = _cu(lengths)
    for causal in (False, True):
        o3, l3 = _fwd(q, k, v, causal, cu)
        for ctas in ("1", "3"):
            monkeypatch.setenv("FOLD_FWD_CTAS", ctas)
            o, l = _fwd(q, k, v, causal, cu)
            _assert_bits(o3, o, f"{ctas} CTAs out (causal={causal})")
            _assert_bits(l3, l, f"{ctas} CTAs lse (causal={causal})")
        monkeypatch.delenv("FOLD_FWD_CTAS")
        for i, n in enumerate(lengths):
            if n == 0:
                continue
            a, b = int(cu[i]), int(cu[i + 1])
            oa, la = _fwd(q[a:b].contiguous(), k[a:b].contiguous(), v[a:b].contiguous(), causal,
                          _cu([n]))
            _assert_bits(o3[a:b], oa, f"request {i} alone vs packed out (causal={causal})")
            _assert_bits(l3[:, a:b], la, f"request {i} alone vs packed lse (causal={causal})")
        n = 257
        dense = [_randn((3, n, h, D), dtype, 250 + i) for i, h in enumerate((H, Hkv, Hkv))]
        od, _ = _fwd(*dense, causal)
        ov, _ = _fwd(*(x.reshape(3 * n, x.shape[2], D) for x in dense), causal, _cu([n] * 3))
        _assert_bits(od.reshape(3 * n, H, D), ov, f"dense vs varlen out (causal={causal})")
        monkeypatch.setenv("FOLD_FWD_VARIANT", "v1.2-2wg")
        od2, _ = _fwd(*dense, causal)
        monkeypatch.delenv("FOLD_FWD_VARIANT")
        ref_out = _ref64(*dense, torch.zeros_like(dense[0]), causal, 1.0 / D ** 0.5)[0]
        e3, e2 = _rel(od, ref_out), _rel(od2, ref_out)
        assert e3 <= 1.05 * e2 + 1e-5, f"three warpgroups' error {e3} vs two's {e2} (causal={causal})"


def _poison_allocator(*sizes, byte=0xFF):
    """Fills blocks of these byte sizes with `byte` and frees them, so that the caching
    allocator hands that memory to the next allocations (0xff: NaN in every float format)."""
    junk = [torch.full((n,), byte, dtype=torch.uint8, device=DEV) for n in sizes]
    del junk


def _fwd_on_poison(q, k, v, causal, cu=None):
    """_fwd with NaN in the memory the outputs will get (blocks of their sizes filled and
    freed just before, which the caching allocator hands back): a tile the kernel skipped
    then shows as NaN instead of as the bits an earlier call left there."""
    total = q.shape[0] if cu is not None else q.shape[0] * q.shape[1]
    _poison_allocator(q.numel() * q.element_size(), q.shape[-2] * total * 4)  # out, lse
    return _fwd(q, k, v, causal, cu)


@pytest.mark.parametrize("causal", [False, True])
def test_forward_tile_order_chunks_keep_bits(causal, monkeypatch):
    """FOLD_FWD_HB_CHUNK sets the forward's tile order (chunks of (request, head) pairs,
    tile_order.cuh, in units of a KV head's group of 4 query heads here): 0 = one chunk (the
    order before the chunks), 1 = one group per chunk, 5 / 9 / 13 = 2 / 3 / 4 groups (the last
    chunk short), unset = the default (non-causal dense: two chunks of two waves each at
    12 x 2 groups of 3 query blocks). Scheduling only: every order gives v1's bits (v1 has no
    tile order), for v1.1 and the persistent v1.2 (also with 3 CTAs walking the chunks), with
    an empty request, idle tiles and NaN left in the outputs' memory beforehand."""
    dtype, D = torch.bfloat16, 128
    lengths, H, Hkv = [700, 1, 130, 257, 0, 513, 64], 8, 2
    T = sum(lengths)
    q, k, v = (_randn((T, h, D), dtype, 170 + i) for i, h in enumerate((H, Hkv, Hkv)))
    cu = _cu(lengths)
    dense = [_randn((12, 300, h, D), dtype, 180 + i) for i, h in enumerate((H, Hkv, Hkv))]
    monkeypatch.setenv("FOLD_FWD_VARIANT", "v1")
    expect = (_fwd(q, k, v, causal, cu), _fwd(*dense, causal))
    monkeypatch.delenv("FOLD_FWD_VARIANT")
    for variant in ("", "v1.1", "v1.2", "v1.2/3"):
        name, _, ctas = variant.partition("/")
        for chunk in ("", "0", "1", "5", "9", "13"):
            for setting in ("FOLD_FWD_VARIANT", "FOLD_FWD_CTAS", "FOLD_FWD_HB_CHUNK"):
                monkeypatch.delenv(setting, raising=False)
            if name:
                monkeypatch.setenv("FOLD_FWD_VARIANT", name)
            if ctas:
                monkeypatch.setenv("FOLD_FWD_CTAS", ctas)
            if chunk:
                monkeypatch.setenv("FOLD_FWD_HB_CHUNK", chunk)
            got = (_fwd_on_poison(q, k, v, causal, cu), _fwd_on_poison(*dense, causal))
            for (a_out, a_lse), (b_out, b_lse), kind in zip(expect, got, ("varlen", "dense")):
                what = f"{variant or 'default'} chunk {chunk or 'default'} {kind} (causal={causal})"
                _assert_bits(a_out, b_out, f"{what} out")
                _assert_bits(a_lse, b_lse, f"{what} lse")


def test_forward_tile_order_setting_is_checked(monkeypatch):
    """FOLD_FWD_HB_CHUNK must be 0 or a positive integer: anything else is refused with a
    message naming it (not read as some order); a huge value is one chunk, not an overflow."""
    q, k, v = (_randn((1, 64, h, 64), torch.bfloat16, 190 + i) for i, h in enumerate((2, 1, 1)))
    expect = _fwd(q, k, v, False)
    for bad in ("x", "-1", "3x"):
        monkeypatch.setenv("FOLD_FWD_HB_CHUNK", bad)
        with pytest.raises(ValueError, match="FOLD_FWD_HB_CHUNK"):
            _fwd(q, k, v, False)
    monkeypatch.setenv("FOLD_FWD_HB_CHUNK", "9223372036854775807")
    got = _fwd(q, k, v, False)
    _assert_bits(expect[0], got[0], "huge chunk out")


def test_training_l2_promotion_setting(monkeypatch):
    """FOLD_TRAIN_L2PROMO (the training maps' L2 fill granule, for A/B runs) changes no bits of
    the forward or the backward, and a value other than 0 / 64 / 128 / 256 is refused with a
    message naming it."""
    case = _dense_case(torch.bfloat16, 2, 200, 4, 2, 128, 260)
    expect = _fold(*case, True)
    for value in ("0", "128"):
        monkeypatch.setenv("FOLD_TRAIN_L2PROMO", value)
        for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), expect, _fold(*case, True)):
            _assert_bits(a, b, f"promotion {value} {name}")
    monkeypatch.setenv("FOLD_TRAIN_L2PROMO", "96")
    with pytest.raises(ValueError, match="FOLD_TRAIN_L2PROMO"):
        _fwd(*case[:3], True)


@pytest.mark.parametrize("ctas", ["", "2"])
def test_forward_v12_graph_capture(ctas, monkeypatch):
    """v1.2's static tile schedule needs nothing reset between launches: a captured forward
    replays twice with v1's bits (also with 2 CTAs walking every tile)."""
    dtype, B, S, H, Hkv, D = torch.bfloat16, 3, 300, 4, 2, 128
    q, k, v = (_randn((B, S, h, D), dtype, 160 + i) for i, h in enumerate((H, Hkv, Hkv)))
    cu = None  # dense: the varlen host check reads cu_seqlens, which a capture forbids
    monkeypatch.setenv("FOLD_FWD_VARIANT", "v1")
    expect = _fwd(q, k, v, True, cu)
    monkeypatch.setenv("FOLD_FWD_VARIANT", "v1.2")
    if ctas:
        monkeypatch.setenv("FOLD_FWD_CTAS", ctas)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside the capture
        _fwd(q, k, v, True, cu)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = _fwd(q, k, v, True, cu)
    for rep in range(2):
        out.zero_()
        lse.zero_()
        graph.replay()
        torch.cuda.synchronize()
        _assert_bits(expect[0], out, f"graph replay {rep} out")
        _assert_bits(expect[1], lse, f"graph replay {rep} lse")


def test_varlen_forward_backward_graph_capture_replays_new_offsets():
    """fold_attn_varlen_func under CUDA-graph capture (no host read of cu_seqlens: the
    packed length bounds the grid): a replay gives the eager bits, and a replay after new
    offsets are copied into the captured cu_seqlens gives the eager bits of those."""
    dtype, H, Hkv, D = torch.bfloat16, 4, 2, 64
    T = 400
    q, k, v, dout = (_randn((T, h, D), dtype, 210 + i) for i, h in enumerate((H, Hkv, Hkv, H)))
    offsets = ([0, 7, 7, 250, 251, 400], [0, 128, 129, 300, 399, 400])
    expect = [_fold(q, k, v, dout, True, _cu(list(torch.tensor(o).diff().tolist())))
              for o in offsets]
    cu = torch.tensor(offsets[0], dtype=torch.int32, device="cuda")
    qg, kg, vg = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    static_dout = dout.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside the capture
        fa.fold_attn_varlen_func(qg, kg, vg, cu, causal=True).backward(static_dout)
    torch.cuda.current_stream().wait_stream(s)
    qg.grad = kg.grad = vg.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = fa.fold_attn_varlen_func(qg, kg, vg, cu, causal=True, return_lse=True)
        out.backward(static_dout)
    for o, want in zip(offsets, expect):
        cu.copy_(torch.tensor(o, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        got = (out, lse, qg.grad, kg.grad, vg.grad)
        for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), want, got):
            _assert_bits(a, b, f"replay with offsets {o}: {name}")


def test_runs_on_current_stream_and_graph_capture():
    """The ops run on torch's current stream; the backward replays in a CUDA graph."""
    dtype, B, S, H, Hkv, D = torch.bfloat16, 2, 150, 4, 2, 64
    q, k, v, dout = _dense_case(dtype, B, S, H, Hkv, D, 100)
    expect = _fold(q, k, v, dout, True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = _fold(q, k, v, dout, True)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), expect, got):
        _assert_bits(a, b, f"side stream {name}")

    qg, kg, vg = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    static_dout = dout.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside the capture
        fa.fold_attn_func(qg, kg, vg, causal=True).backward(static_dout)
    torch.cuda.current_stream().wait_stream(s)
    qg.grad = kg.grad = vg.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fa.fold_attn_func(qg, kg, vg, causal=True)
        out.backward(static_dout)
    graph.replay()
    torch.cuda.synchronize()
    for name, a, b in zip(("dq", "dk", "dv"), expect[2:], (qg.grad, kg.grad, vg.grad)):
        _assert_bits(a, b, f"graph {name}")
