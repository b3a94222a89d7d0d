"""Accuracy metrics against one FP32 (or FP64) reference per case.

Error is the relative Frobenius norm over the whole case plus the worst single
row (a row is one query token of one head: the last dimension). The bf16 floor is
the error of the reference itself rounded once to bf16: no bf16 output can be
expected to do better.
"""
from __future__ import annotations

import math
from typing import Dict, Optional

import torch


def _f64(x: torch.Tensor) -> torch.Tensor:
    # float64 on CPU, float32 kept on GPU (fp64 is slow there; fp32 norms of fp32
    # differences are accurate to ~1e-7 relative, far below any bf16 error).
    return x.double() if x.device.type == "cpu" else x.float()


def rel_fro_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref||_F / ||ref||_F over every element."""
    if out.shape != ref.shape:
        raise ValueError(f"shape mismatch: {tuple(out.shape)} vs {tuple(ref.shape)}")
    r = _f64(ref)
    d = _f64(out) - r
    den = torch.linalg.vector_norm(r).item()
    num = torch.linalg.vector_norm(d).item()
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return num / den


ROW_FLOOR = 2.0 ** -10  # relative to the tensor's RMS row norm (see worst_row_error)


def worst_row_error(out: torch.Tensor, ref: torch.Tensor, eps: float = 1e-30) -> float:
    """max over rows of ||out_row - ref_row|| / max(||ref_row||, ROW_FLOOR x RMS row norm); a
    row is the last dim. The floor keeps rows whose reference is zero up to rounding (causal
    dQ's first query row: one key, so dS = 0) from turning rounding noise into ratios of 1e24;
    a row at or above the floor is measured against its own norm."""
    if out.shape != ref.shape:
        raise ValueError(f"shape mismatch: {tuple(out.shape)} vs {tuple(ref.shape)}")
    d = ref.shape[-1]
    r = _f64(ref).reshape(-1, d)
    o = _f64(out).reshape(-1, d)
    num = torch.linalg.vector_norm(o - r, dim=1)
    if num.numel() == 0:
        return 0.0
    rn = torch.linalg.vector_norm(r, dim=1)
    floor = ROW_FLOOR * torch.sqrt(torch.mean(rn * rn)).item()
    den = rn.clamp_min(max(floor, eps))
    return (num / den).max().item()


def nonfinite_count(out: torch.Tensor) -> int:
    return int((~torch.isfinite(out.float())).sum().item())


def bf16_floor(ref: torch.Tensor) -> Dict[str, float]:
    """Error of the reference rounded once to bf16 (the best a bf16 output can do)."""
    rounded = ref.to(torch.bfloat16).to(ref.dtype)
    return {"err": rel_fro_error(rounded, ref), "worst_row": worst_row_error(rounded, ref)}


def error_report(out: torch.Tensor, ref: torch.Tensor) -> Dict[str, float]:
    """Everything recorded for one output tensor against its reference."""
    bad = nonfinite_count(out)
    rep = {"err": rel_fro_error(out, ref), "worst_row": worst_row_error(out, ref),
           "nonfinite": bad}
    if bad:
        rep["err"] = math.inf
        rep["worst_row"] = math.inf
    return rep


def outlier_flags(errors: Dict[str, Optional[float]], factor: float = 20.0) -> Dict[str, bool]:
    """True for an arm whose error exceeds `factor` x the best arm's error.

    Such an arm is computing something else: it is reported but not ranked.
    """
    finite = [e for e in errors.values() if e is not None and math.isfinite(e)]
    if not finite:
        return {k: False for k in errors}
    best = min(finite)
    floor = max(best, 1e-12)
    return {k: (e is None or not math.isfinite(e) or e > factor * floor) for k, e in errors.items()}


def error_band(baseline_errors: Dict[str, float]) -> Dict[str, Optional[float]]:
    """Decode accuracy budget: band = largest bf16-baseline error, strict = smallest."""
    vals = [e for e in baseline_errors.values() if e is not None and math.isfinite(e)]
    if not vals:
        return {"band": None, "strict": None}
    return {"band": max(vals), "strict": min(vals)}


def bitwise_equal(a, b) -> bool:
    """True when two tensors (or tuples of tensors) are identical bit for bit."""
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(bitwise_equal(x, y) for x, y in zip(a, b))
    if a is None or b is None:
        return a is None and b is None
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.is_floating_point:
        # compare the bit patterns: NaN == NaN with the same payload, -0 != +0
        ia = a.contiguous().view(_int_view(a.dtype))
        ib = b.contiguous().view(_int_view(b.dtype))
        return bool(torch.equal(ia, ib))
    return bool(torch.equal(a, b))


def _int_view(dt: torch.dtype) -> torch.dtype:
    return {2: torch.int16, 4: torch.int32, 8: torch.int64}[torch.empty((), dtype=dt).element_size()]
