"""GPU: sliding windows (window_size) in the CUDA training forward and deterministic backward.

The same accuracy bar as test_gpu_training.py (each of out, dq, dk, dv within 1.05x torch SDPA's
own error in the same dtype, with the window as its boolean mask, + 1e-5, against float64), and
the same invariances bit for bit: repeats, a request alone vs inside a dense batch, alone vs
packed at an offset (the window never reaches into a neighbour), dense vs varlen; every kernel
form and schedule setting keeps the bits; a window that masks nothing gives the plain bits.

Skipped without a CUDA device or when the library was built without CUDA.
"""


import pytest
import torch
import torch.nn.functional as F

import fold_attention as fa
from helpers import (assert_bitwise_equal, bits, cu_from_lengths, gpu_ready, make_dense_on,
                     randn_on, window_mask)

_READY, _WHY = gpu_ready()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _READY, reason=_WHY)]

DEV = "cuda"
HALF = (torch.bfloat16, torch.float16)
DIMS = (64, 96, 128, 256)
TIME_LIMIT_S = 120  # a hung kernel must not eat the GPU lease

# (causal, window_size): windows that cut inside blocks on one side or both, one narrower than
# a block, one key only, one longer than the sequence (masks nothing).
WINDOWS = [
    (True, (100, -1)),
    (True, (300, 0)),
    (True, (0, 0)),
    (False, (150, 77)),
    (False, (-1, 40)),
    (False, (9, 9)),
    (True, (5000, 0)),
]
WINDOW_IDS = ["causal100", "causal300", "self", "both150_77", "after40", "both9", "wide"]


def _rel(x, ref, floor):
    ref = ref.double()
    return (x.double() - ref).norm().item() / max(ref.norm().item(), floor)


def _ref64(q, k, v, dout, causal, window):
    q, k, v = (x.detach().double().requires_grad_(True) for x in (q, k, v))
    rep = q.shape[2] // k.shape[2]
    kr, vr = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q, kr) * q.shape[-1] ** -0.5
    s = s.masked_fill(~window_mask(q.shape[1], causal, window, DEV), float("-inf"))
    out = torch.einsum("bhij,bjhd->bihd", torch.softmax(s, dim=-1), vr)
    out.backward(dout.double())
    return out.detach(), q.grad, k.grad, v.grad


def _sdpa(q, k, v, dout, causal, window):
    q, k, v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    rep = q.shape[2] // k.shape[2]
    kr, vr = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), kr.transpose(1, 2), vr.transpose(1, 2),
        attn_mask=window_mask(q.shape[1], causal, window, DEV),
    ).transpose(1, 2)
    out.backward(dout)
    return out.detach(), q.grad, k.grad, v.grad


def _fold(q, k, v, dout, causal, window, cu=None):
    q, k, v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    if cu is None:
        out, lse = fa.fold_attn_func(q, k, v, causal=causal, window_size=window, return_lse=True)
    else:
        out, lse = fa.fold_attn_varlen_func(q, k, v, cu, causal=causal, window_size=window,
                                            return_lse=True)
    out.backward(dout)
    return out.detach(), lse, q.grad, k.grad, v.grad


@pytest.mark.parametrize("causal,window", WINDOWS, ids=WINDOW_IDS)
@pytest.mark.parametrize("D", DIMS)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_window_accuracy_dense(dtype, D, causal, window):
    B, S, H, Hkv = 2, 600, 4, 2
    args = make_dense_on(B, S, H, Hkv, D, dtype, 1)
    got = _fold(*args, causal, window)
    ref = _ref64(*args, causal, window)
    sdpa = _sdpa(*args, causal, window)
    floor = args[3].double().norm().item() * 1e-3  # (a one-key window's dq / dk are 0)
    for name, x, s, r in zip(("out", "dq", "dk", "dv"), got[:1] + got[2:], sdpa, ref):
        assert torch.isfinite(x).all(), f"{name}: non-finite values"
        e, es = _rel(x, r, floor), _rel(s, r, floor)
        assert e <= 1.05 * es + 1e-5, f"{name}: error {e:.3e} > 1.05 x SDPA's {es:.3e} + 1e-5"
    rep = H // Hkv
    s = torch.einsum("bihd,bjhd->bhij", args[0].double(),
                     args[1].double().repeat_interleave(rep, 2)) * D**-0.5
    s = s.masked_fill(~window_mask(S, causal, window, DEV), float("-inf"))
    assert torch.allclose(got[1].double(), torch.logsumexp(s, -1), atol=1e-3, rtol=0)


@pytest.mark.parametrize("causal,window", WINDOWS[:4], ids=WINDOW_IDS[:4])
@pytest.mark.parametrize("D", DIMS)
def test_window_invariances(D, causal, window):
    """Repeats, alone vs in a dense batch, alone vs packed at an offset, dense vs varlen."""
    dtype, S, H, Hkv = torch.bfloat16, 333, 8, 2
    one = make_dense_on(1, S, H, Hkv, D, dtype, 20)
    alone = _fold(*one, causal, window)
    again = _fold(*one, causal, window)
    for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), alone, again):
        assert_bitwise_equal(a, b, f"repeat {name}")
    batch = [x.clone() for x in make_dense_on(3, S, H, Hkv, D, dtype, 30)]
    for x, y in zip(batch, one):
        x[1] = y[0]
    res = _fold(*batch, causal, window)
    for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), alone, res):
        assert_bitwise_equal(a[0], b[1], f"dense batch {name}")
    lengths = [13, S, 250]
    T = sum(lengths)
    packed = [randn_on((T,) + x.shape[2:], dtype, 60 + i) for i, x in enumerate(one)]
    for x, y in zip(packed, one):
        x[13:13 + S] = y[0]
    res = _fold(*packed, causal, window, cu_from_lengths(lengths).to(DEV))
    for name, a, b in zip(("out", "dq", "dk", "dv"), alone[:1] + alone[2:], res[:1] + res[2:]):
        assert_bitwise_equal(a[0], b[13:13 + S], f"packed {name}")
    assert_bitwise_equal(alone[1][0], res[1][:, 13:13 + S], "packed lse")


@pytest.mark.parametrize("D", DIMS)
def test_a_window_that_masks_nothing_gives_the_plain_result(D):
    """A window longer than the sequence runs the windowed kernel instances (the instance
    depends on the arguments, never on the lengths): the same masking decisions as the plain
    call, so the same result to within the compiled arithmetic's rounding (bits equal where nvcc
    compiled both alike; reported, not required)."""
    args = make_dense_on(2, 300, 4, 2, D, torch.bfloat16, 40)
    for causal, window in ((True, (299, 0)), (False, (299, 299)), (False, (400, -1))):
        plain = _fold(*args, causal, (-1, -1))
        wide = _fold(*args, causal, window)
        same = []
        for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), plain, wide):
            assert _rel(b, a, 1e-30) < 1e-2, f"{causal} {window} {name}"
            same.append(bool(torch.equal(bits(a), bits(b))))
        print(f"D {D} causal {causal} window {window}: bits equal {same}")


@pytest.mark.parametrize("D", (64, 96, 128))
def test_window_forms_and_schedules_keep_bits(D, monkeypatch):
    """The forward's trim forms and K / V-bounds scan, the backward's kernel forms and chunked
    schedules: the same bits with a window as without the setting. FOLD_FWD_CTAS=1 / 2 make one
    or two CTAs walk every tile, chaining tiles of different key ranges (k_first, n_kblocks)
    through one pipeline: its stage / parity counters across tiles."""
    causal, window = False, (150, 77)
    args = make_dense_on(3, 500, 6, 3, D, torch.bfloat16, 50)
    for name in ("FOLD_FWD_TRIM", "FOLD_TRAIN_KV_BOUNDS", "FOLD_BWD_VARIANT", "FOLD_BWD_HB_CHUNK",
                 "FOLD_FWD_CTAS"):
        monkeypatch.delenv(name, raising=False)
    ref = _fold(*args, causal, window)
    settings = [("FOLD_FWD_TRIM", "0"), ("FOLD_TRAIN_KV_BOUNDS", "1"), ("FOLD_TRAIN_KV_BOUNDS", "0"),
                ("FOLD_FWD_CTAS", "1"), ("FOLD_FWD_CTAS", "2")]
    settings += [("FOLD_BWD_VARIANT", v) for v in ("ws", "sync", "wsd", "pin0", "epi0")]
    settings += [("FOLD_BWD_HB_CHUNK", c) for c in "129"]
    for var, value in settings:
        monkeypatch.setenv(var, value)
        got = _fold(*args, causal, window)
        monkeypatch.delenv(var)
        for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), got, ref):
            assert_bitwise_equal(a, b, f"{var}={value} {name}")


@pytest.mark.parametrize("D", DIMS)
def test_window_backward_v0_agrees(D, monkeypatch):
    """v0's main kernel (FOLD_BWD_V0=1; the default at D 256) applies the same window: its
    gradients agree with the wgmma kernels' to well under the bar (different fp32 orders)."""
    args = make_dense_on(2, 333, 8, 2, D, torch.bfloat16, 90)
    a = _fold(*args, True, (100, -1))
    monkeypatch.setenv("FOLD_BWD_V0", "1")
    b = _fold(*args, True, (100, -1))
    monkeypatch.delenv("FOLD_BWD_V0")
    for name, x, y in zip(("dq", "dk", "dv"), a[2:], b[2:]):
        assert _rel(x, y, 1e-30) < 1e-2, name


def test_forward_v0_layout_applies_the_window():
    """A view TMA cannot describe (k with token stride 0: every token the same key) runs the
    v0 forward: it applies the window too (within the bar of the same inputs made contiguous)."""
    D, S = 64, 300
    q = randn_on((1, S, 2, D), torch.bfloat16, 70)
    k = randn_on((1, 1, 2, D), torch.bfloat16, 71).expand(1, S, 2, D)
    v = randn_on((1, S, 2, D), torch.bfloat16, 72)
    window = (40, -1)
    out = fa.fold_attn_func(q, k, v, causal=True, window_size=window)
    ref = fa.fold_attn_func(q, k.contiguous(), v, causal=True, window_size=window)
    assert _rel(out, ref, 1e-30) < 1e-2


def test_forward_ab_variants_refuse_a_cutting_window(monkeypatch):
    args = make_dense_on(1, 300, 2, 2, 128, torch.bfloat16, 80)
    for variant in ("v1", "v1.1"):
        monkeypatch.setenv("FOLD_FWD_VARIANT", variant)
        with pytest.raises(NotImplementedError, match="window"):
            fa.fold_attn_func(*args[:3], causal=True, window_size=(50, 0))
        monkeypatch.delenv("FOLD_FWD_VARIANT")


def test_request_alone_equals_request_beside_a_longer_one():
    """A window (400) longer than the request (333) but shorter than its neighbour (1000): the
    window masks nothing for the request and cuts its neighbour's rows; the request's bits are
    the same alone and packed beside it (the kernel instance follows the arguments only)."""
    dtype, D, H, Hkv, L = torch.bfloat16, 128, 8, 2, 333
    window = (399, 0)
    one = [x[0] for x in make_dense_on(1, L, H, Hkv, D, dtype, 95)]
    alone = _fold(*one, True, window, cu_from_lengths([L]).to(DEV))
    lengths = [1000, L]
    packed = [randn_on((sum(lengths),) + x.shape[1:], dtype, 96 + i) for i, x in enumerate(one)]
    for x, y in zip(packed, one):
        x[1000:] = y
    res = _fold(*packed, True, window, cu_from_lengths(lengths).to(DEV))
    for name, a, b in zip(("out", "dq", "dk", "dv"), alone[:1] + alone[2:], res[:1] + res[2:]):
        assert_bitwise_equal(a, b[1000:], f"beside a longer one {name}")
