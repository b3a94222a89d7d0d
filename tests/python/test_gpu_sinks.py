"""GPU: attention sinks (gpt-oss's per-head sink logits) in the CUDA training forward.

The forward kernels fold head h's sink into every row after its last key block (the kSinks
instances of v1.2 and v0); the backward is the one of every call (it takes the forward's LSE,
which holds the sink's mass), and d sinks comes from out, dout and the LSE in Python.

Accuracy bars, against float64 with the sink column written out (test_sinks.py's reference):
- out, dq, dk, dv: within 1.05x torch SDPA's own error in the same dtype + 1e-5, as in
  test_gpu_window.py. SDPA takes no sinks, but it can express one exactly: one more key of zeros
  (score q . 0 = 0) and zero value, whose column of a float attn_mask holds sinks[h] (the other
  columns 0 or -inf: the causal / window mask), so that the extra column's logit is sinks[h]
  itself; the sinks are made representable in bf16 (and so in fp16) first, so the mask in the
  inputs' dtype carries them unchanged. The keys are padded to a multiple of 16 with masked
  zero keys (exact: their weight is 2^-inf = 0), so that SDPA's fused kernels take the mask.
- the LSE: within 1e-3 of float64's logsumexp over the scores and the sink (as the window test).
- d sinks: SDPA's gradient of a float mask is not available on every backend, and the dtype's
  CPU reference is no steady gauge for a handful of numbers (one per head: two runs' rounding
  errors differ by factors at random there), so a fixed multiple of the rounding floor instead:
  d sinks[h] = -sum_i w_i Delta_i (w_i = exp(sinks[h] - lse_i), Delta_i = dO_i . O_i), and out
  rounded to the dtype (unit roundoff u: 2^-8 bf16, 2^-11 fp16) moves Delta_i by about
  u |dO_i| |O_i| / sqrt(D) at random, so the floor is u sqrt(sum_i (w_i |dO_i| |O_i|)^2 / D);
  the kernels' out (error about 0.6 u per element, test_accuracy.py's figures) should miss by
  about 0.6 floor; the bar is 4 floors (+ 1e-5), several standard deviations.
Bits: repeats, a request alone vs inside a dense batch, alone vs packed at an offset; the K / V
bounds and schedule settings keep the bits; a sink of -inf gives the plain call's result (it runs
the sinks instance: equal bits expected, reported, closeness required); the A/B forward settings
refuse sinks; the v0 fallback (a layout TMA cannot describe) applies them too.

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
UNIT_ROUNDOFF = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}

# (causal, window_size): no window, causal and not; a window that cuts (127 keys back), causal,
# and one on both sides, not causal.
CASES = [(True, (-1, -1)), (False, (-1, -1)), (True, (127, 0)), (False, (150, 77))]
CASE_IDS = ["causal", "full", "causal_w127", "both150_77"]


def _sinks(H, seed):
    """Per-head sinks on both sides of the rows' maxima (scores here are about N(0, 1), a row's
    maximum about 3): some below (alpha = 1, a small mass), some far above (the running max moves
    to the sink: alpha < 1 rescales O and l). Representable in bf16 and fp16."""
    s = randn_on((H,), torch.float32, seed, 2.0)
    s[0] = 8.0
    if H > 1:
        s[1] = -3.0
    return s.bfloat16().float()


def _rel(x, ref, floor):
    ref = ref.double()
    return (x.double() - ref).norm().item() / max(ref.norm().item(), floor)


def _ref64(q, k, v, dout, sinks, causal, window):
    """float64: the logits with the sink as one more column, softmax, the sink's column dropped;
    out, lse (B, H, S), dq, dk, dv, dsinks."""
    q, k, v, sinks = (x.detach().double().requires_grad_(True) for x in (q, k, v, sinks))
    B, S, H, D = q.shape
    rep = H // k.shape[2]
    kr, vr = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q, kr) * D**-0.5
    s = s.masked_fill(~window_mask(S, causal, window, DEV), float("-inf"))
    s = torch.cat([s, sinks.reshape(1, H, 1, 1).expand(B, H, S, 1)], dim=-1)
    out = torch.einsum("bhij,bjhd->bihd", torch.softmax(s, dim=-1)[..., :-1], vr)
    lse = torch.logsumexp(s, dim=-1).detach()
    out.backward(dout.double())
    return out.detach(), lse, q.grad, k.grad, v.grad, sinks.grad


def _sdpa(q, k, v, dout, sinks, causal, window):
    """torch SDPA in the inputs' dtype with the sink as a key of zeros whose mask column holds
    sinks[h] (exact: its logit is 0 + sinks[h], its value 0), keys padded to a multiple of 16
    with masked zero keys; out, dq, dk, dv."""
    q, k, v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    B, S, H, D = q.shape
    rep = H // k.shape[2]
    kr, vr = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
    n_keys = (S + 1 + 15) // 16 * 16
    pad = torch.zeros(B, n_keys - S, H, D, dtype=q.dtype, device=DEV)
    kx, vx = torch.cat([kr, pad], dim=1), torch.cat([vr, pad], dim=1)
    bias = torch.full((H, S, n_keys), float("-inf"), dtype=torch.float32, device=DEV)
    bias[:, :, :S] = torch.where(window_mask(S, causal, window, DEV), 0.0, float("-inf"))
    bias[:, :, S] = sinks.reshape(H, 1)
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), kx.transpose(1, 2), vx.transpose(1, 2),
        attn_mask=bias.to(q.dtype).unsqueeze(0),
    ).transpose(1, 2)
    out.backward(dout)
    return out.detach(), q.grad, k.grad, v.grad


def _fold(q, k, v, dout, sinks, causal, window, cu=None):
    """out, lse, dq, dk, dv, dsinks (dsinks None without sinks)."""
    q, k, v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    s = None if sinks is None else sinks.detach().clone().requires_grad_(True)
    if cu is None:
        out, lse = fa.fold_attn_func(q, k, v, causal=causal, window_size=window, sinks=s,
                                     return_lse=True)
    else:
        out, lse = fa.fold_attn_varlen_func(q, k, v, cu, causal=causal, window_size=window,
                                            sinks=s, return_lse=True)
    out.backward(dout)
    return out.detach(), lse, q.grad, k.grad, v.grad, None if s is None else s.grad


@pytest.mark.parametrize("causal,window", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("D", DIMS)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_sinks_accuracy_dense(dtype, D, causal, window):
    # S 600: every tile size leaves a last tile with rows past the end (and, at D 64's 192-row
    # tiles, idle consumers: 600 = 3 x 192 + 24).
    B, S, H, Hkv = 2, 600, 4, 2
    args = make_dense_on(B, S, H, Hkv, D, dtype, 1)
    sinks = _sinks(H, 5)
    got = _fold(*args, sinks, causal, window)
    ref = _ref64(*args, sinks, causal, window)
    sdpa = _sdpa(*args, sinks, causal, window)
    floor = args[3].double().norm().item() * 1e-3
    for name, x, s, r in zip(("out", "dq", "dk", "dv"), got[:1] + got[2:5], sdpa,
                             ref[:1] + ref[2:5]):
        assert torch.isfinite(x).all(), f"{name}: non-finite values"
        e, es = _rel(x, r, floor), _rel(s, r, floor)
        assert e <= 1.05 * es + 1e-5, f"{name}: error {e:.3e} > 1.05 x SDPA's {es:.3e} + 1e-5"
    assert torch.allclose(got[1].double(), ref[1], atol=1e-3, rtol=0), "lse"  # (B, H, S)
    # d sinks: within 4 rounding floors of out (see the module's docstring).
    o64, lse64 = ref[0], ref[1]  # (B, S, H, D), (B, H, S)
    w = torch.exp(sinks.double().reshape(1, H, 1) - lse64).permute(0, 2, 1)  # (B, S, H)
    terms = w * args[3].double().norm(dim=-1) * o64.norm(dim=-1)
    dfloor = UNIT_ROUNDOFF[dtype] * (terms.square().sum(dim=(0, 1)) / D).sqrt()
    err = (got[5].double() - ref[5]).abs()
    assert torch.isfinite(got[5]).all(), "dsinks: non-finite values"
    assert (err <= 4 * dfloor + 1e-5).all(), f"dsinks: error {err.tolist()} > 4 x {dfloor.tolist()}"
    print(f"{dtype} D {D} {causal} {window}: dsinks error / floor "
          f"{(err / dfloor).tolist()}")


@pytest.mark.parametrize("causal,window", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("D", DIMS)
def test_sinks_invariances(D, causal, window):
    """Repeats (d sinks too), alone vs in a dense batch, alone vs packed at an offset."""
    dtype, S, H, Hkv = torch.bfloat16, 333, 8, 2
    sinks = _sinks(H, 21)
    one = make_dense_on(1, S, H, Hkv, D, dtype, 20)
    alone = _fold(*one, sinks, causal, window)
    again = _fold(*one, sinks, causal, window)
    for name, a, b in zip(("out", "lse", "dq", "dk", "dv", "dsinks"), alone, again):
        assert_bitwise_equal(a, b, f"repeat {name}")
    batch = [x.clone() for x in make_dense_on(3, S, H, Hkv, D, dtype, 30)]
    for x, y in zip(batch, one):
        x[1] = y[0]
    res = _fold(*batch, sinks, causal, window)
    # (d sinks sums over every row of the batch: not a request's own.)
    for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), alone[:5], res[:5]):
        assert_bitwise_equal(a[0], b[1], f"dense batch {name}")
    lengths = [13, S, 250]
    T = sum(lengths)
    packed = [randn_on((T,) + x.shape[2:], dtype, 60 + i) for i, x in enumerate(one)]
    for x, y in zip(packed, one):
        x[13:13 + S] = y[0]
    res = _fold(*packed, sinks, causal, window, cu_from_lengths(lengths).to(DEV))
    for name, a, b in zip(("out", "dq", "dk", "dv"), alone[:1] + alone[2:5], res[:1] + res[2:5]):
        assert_bitwise_equal(a[0], b[13:13 + S], f"packed {name}")
    assert_bitwise_equal(alone[1][0], res[1][:, 13:13 + S], "packed lse")


@pytest.mark.parametrize("D", DIMS)
def test_a_sink_of_minus_inf_gives_the_plain_result(D):
    """Sinks of -inf run the sinks instance (the instance follows the argument, not its values),
    whose add_sink then changes nothing (alpha = 1 exactly, l + 2^-inf = l): the plain call's
    result to within the compiled arithmetic (bits equal unless nvcc compiled the shared code
    differently around it; reported, not required), and d sinks = 0."""
    H = 4
    args = make_dense_on(2, 300, H, 2, D, torch.bfloat16, 40)
    none = torch.full((H,), float("-inf"), device=DEV)
    for causal, window in CASES:
        plain = _fold(*args, None, causal, window)
        minf = _fold(*args, none, causal, window)
        same = []
        for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), plain[:5], minf[:5]):
            assert _rel(b, a, 1e-30) < 1e-2, f"{causal} {window} {name}"
            same.append(bool(torch.equal(bits(a), bits(b))))
        assert torch.equal(minf[5], torch.zeros_like(minf[5])), "dsinks of -inf sinks"
        print(f"D {D} causal {causal} window {window}: bits equal {same}")


@pytest.mark.parametrize("D", DIMS)
def test_sinks_settings_keep_bits(D, monkeypatch):
    """The forward's K / V bounds (scan instance or not), trim forms and CTA caps: the same bits
    with sinks as without the setting. FOLD_FWD_CTAS=1 / 2 make one or two CTAs walk every tile,
    each reading its own head's sink."""
    H = 6
    sinks = _sinks(H, 51)
    args = make_dense_on(3, 500, H, 3, D, torch.bfloat16, 50)
    names = ("FOLD_FWD_TRIM", "FOLD_TRAIN_KV_BOUNDS", "FOLD_FWD_KV_BOUNDS", "FOLD_FWD_CTAS")
    for name in names:
        monkeypatch.delenv(name, raising=False)
    settings = [("FOLD_TRAIN_KV_BOUNDS", "1"), ("FOLD_TRAIN_KV_BOUNDS", "0"),
                ("FOLD_FWD_KV_BOUNDS", "pass"), ("FOLD_FWD_TRIM", "0"), ("FOLD_FWD_CTAS", "1"),
                ("FOLD_FWD_CTAS", "2")]
    for causal, window in ((True, (-1, -1)), (False, (150, 77))):
        ref = _fold(*args, sinks, causal, window)
        for var, value in settings:
            monkeypatch.setenv(var, value)
            got = _fold(*args, sinks, causal, window)
            monkeypatch.delenv(var)
            for name, a, b in zip(("out", "lse", "dq", "dk", "dv", "dsinks"), got, ref):
                assert_bitwise_equal(a, b, f"{causal} {window} {var}={value} {name}")


@pytest.mark.parametrize("window", [(-1, -1), (40, -1)])
def test_forward_v0_layout_applies_the_sinks(window):
    """A view TMA cannot describe (k with token stride 0: every token the same key) runs the
    v0 forward: it applies the sinks too (close to the same inputs made contiguous, which run
    v1.2)."""
    D, S, H = 64, 300, 2
    q = randn_on((1, S, H, D), torch.bfloat16, 70)
    k = randn_on((1, 1, H, D), torch.bfloat16, 71).expand(1, S, H, D)
    v = randn_on((1, S, H, D), torch.bfloat16, 72)
    sinks = _sinks(H, 73)
    out, lse = fa.fold_attn_func(q, k, v, causal=True, window_size=window, sinks=sinks,
                                 return_lse=True)
    ref, ref_lse = fa.fold_attn_func(q, k.contiguous(), v, causal=True, window_size=window,
                                     sinks=sinks, return_lse=True)
    plain = fa.fold_attn_func(q, k.contiguous(), v, causal=True, window_size=window)
    assert _rel(out, ref, 1e-30) < 1e-2
    assert torch.allclose(lse, ref_lse, atol=1e-3, rtol=0)
    assert _rel(plain, ref, 1e-30) > 1e-1  # (the sinks matter here: sinks[0] = 8)


def test_forward_ab_settings_refuse_sinks(monkeypatch):
    args = make_dense_on(1, 300, 2, 2, 64, torch.bfloat16, 80)
    sinks = _sinks(2, 81)
    for var, value in (("FOLD_FWD_VARIANT", "v1"), ("FOLD_FWD_VARIANT", "v1.1"),
                       ("FOLD_FWD_VARIANT", "v1.1-nopp"), ("FOLD_FWD_VARIANT", "v1.2-2wg"),
                       ("FOLD_FWD_EPI", "stg")):
        monkeypatch.setenv(var, value)
        with pytest.raises(NotImplementedError, match="sinks"):
            fa.fold_attn_func(*args[:3], causal=True, sinks=sinks)
        fa.fold_attn_func(*args[:3], causal=True)  # (the setting itself runs)
        monkeypatch.delenv(var)
