import math

import pytest
import torch

from benchmarks import flops, metrics


def test_rel_fro_error_exact_and_scaled():
    ref = torch.randn(4, 8, 16, dtype=torch.float64)
    assert metrics.rel_fro_error(ref.clone(), ref) == 0.0
    assert metrics.rel_fro_error(ref * 1.01, ref) == pytest.approx(0.01, rel=1e-9)
    assert metrics.rel_fro_error(torch.zeros(3), torch.zeros(3)) == 0.0
    assert math.isinf(metrics.rel_fro_error(torch.ones(3), torch.zeros(3)))
    with pytest.raises(ValueError):
        metrics.rel_fro_error(torch.zeros(2), torch.zeros(3))


def test_worst_row_finds_the_bad_row():
    ref = torch.ones(5, 4, dtype=torch.float64)
    out = ref.clone()
    out[3] *= 1.5      # one row 50% off
    out[1] *= 1.1
    assert metrics.worst_row_error(out, ref) == pytest.approx(0.5)
    # the case error is diluted, the worst row is not
    assert metrics.rel_fro_error(out, ref) < 0.3


def test_worst_row_floors_a_zero_reference_row():
    # A row whose reference is zero up to rounding (causal dQ's first row) is measured against
    # 2^-10 of the RMS row norm, not against its own ~1e-30 norm.
    ref = torch.ones(4, 8, dtype=torch.float64)
    ref[0] = 1e-30
    out = ref.clone()
    out[0] = 1e-6
    assert metrics.worst_row_error(out, ref) == pytest.approx(1e-6 / (2.0 ** -10 * (0.75 ** 0.5)), rel=1e-6)
    out[0] = ref[0]
    out[2] *= 1.25  # an ordinary row is still measured against its own norm
    assert metrics.worst_row_error(out, ref) == pytest.approx(0.25)
    assert metrics.worst_row_error(torch.zeros(3, 2), torch.zeros(3, 2)) == 0.0


def test_bf16_floor_is_bf16_rounding():
    torch.manual_seed(0)
    ref = torch.randn(64, 128, dtype=torch.float32)
    fl = metrics.bf16_floor(ref)
    assert 1e-4 < fl["err"] < 4e-3          # bf16 has 8 bits of mantissa
    assert fl["worst_row"] >= fl["err"] * 0.5
    exact = ref.to(torch.bfloat16).float()
    assert metrics.bf16_floor(exact)["err"] == 0.0


def test_error_report_nonfinite():
    ref = torch.ones(2, 3)
    out = ref.clone()
    out[0, 1] = float("nan")
    rep = metrics.error_report(out, ref)
    assert rep["nonfinite"] == 1 and math.isinf(rep["err"]) and math.isinf(rep["worst_row"])


def test_outlier_flags_and_band():
    flags = metrics.outlier_flags({"a": 1e-3, "b": 2e-3, "c": 5e-2, "d": float("nan")})
    assert flags == {"a": False, "b": False, "c": True, "d": True}
    assert metrics.error_band({"x": 1e-3, "y": 3e-3}) == {"band": 3e-3, "strict": 1e-3}
    assert metrics.error_band({}) == {"band": None, "strict": None}


def test_bitwise_equal():
    a = torch.tensor([1.0, float("nan"), 0.0], dtype=torch.bfloat16)
    assert metrics.bitwise_equal(a, a.clone())
    b = a.clone()
    b[2] = -0.0
    assert not metrics.bitwise_equal(a, b)          # -0 differs from +0 bit for bit
    assert metrics.bitwise_equal((a, a), (a.clone(), a.clone()))
    assert not metrics.bitwise_equal(a, a.float())
    c = torch.randn(10)
    d = c.clone()
    d[3] = torch.nextafter(d[3], torch.tensor(float("inf")))
    assert not metrics.bitwise_equal(c, d)


def test_flop_conventions():
    # causal forward = 4*B*H*S^2*D/2; backward 2.5x; non-causal without /2
    f = flops.attn_fwd_flops(8, 16, 2048, 2048, 128, causal=True)
    assert f == 4 * 8 * 16 * 2048 * 2048 * 128 / 2
    assert flops.attn_fwd_flops(8, 16, 2048, 2048, 128, causal=False) == 2 * f
    assert flops.attn_bwd_flops(8, 16, 2048, 2048, 128, True) == 2.5 * f
    assert flops.varlen_fwd_flops([2048] * 8, 16, 128, True) == f
    assert flops.tflops(1e12, 0.5) == 2.0
