"""Argument validation for the attention entry points, done before any C call.

Every check names the offending argument. Wrong Python types and dtypes raise
TypeError; wrong shapes, devices and values raise ValueError. Nothing here modifies
the caller's tensors; cu_seqlens values are checked on a host copy.
"""

from __future__ import annotations

import math
import numbers
import struct
from dataclasses import dataclass

import numpy as np
import torch

from ._device import stream_capturing
from ._lib import FOLD_MAX_HEAD_DIM

__all__ = [
    "SUPPORTED_DTYPES",
    "AttnSpec",
    "require_tensor",
    "require_flag",
    "require_int",
    "check_softmax_scale",
    "check_window_size",
    "check_sinks",
    "check_cu_seqlens",
    "validate_attention",
    "validate_like",
]

SUPPORTED_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class AttnSpec:
    """A validated self-attention call (shapes and options, no data)."""

    varlen: bool
    batch: int
    seqlen: int  # dense: tokens per request; varlen: longest request
    total_tokens: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    dtype: torch.dtype
    device: torch.device
    causal: bool
    softmax_scale: float  # exactly representable in float32
    cu_seqlens: torch.Tensor | None  # contiguous int32, on `device`
    cu_seqlens_host: torch.Tensor | None  # contiguous int32 on the CPU (same values)
    # The sliding window in the C ABI's terms (fold_attn_problem_t): 0 unbounded, else
    # window_size[0] + 1 / window_size[1] + 1 (window_after 0 under causal masking).
    window_before: int = 0
    window_after: int = 0



def require_tensor(x, name: str, fn: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(x).__name__}")
    if x.layout != torch.strided or x.is_nested:
        raise TypeError(f"{fn}: {name} must be a dense (strided) tensor, got layout {x.layout}"
                        f"{' (nested)' if x.is_nested else ''}")
    return x


def require_flag(x, name: str, fn: str) -> bool:
    # bool, or an integer 0/1 (numpy bools and ints included); nothing else.
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, numbers.Integral) and not isinstance(x, torch.Tensor):
        if int(x) in (0, 1):
            return bool(int(x))
        raise ValueError(f"{fn}: {name} must be True or False, got {x!r}")
    raise TypeError(f"{fn}: {name} must be a bool, got {type(x).__name__}")


def require_int(x, name: str, fn: str, *, minimum: int | None = None,
                maximum: int | None = None) -> int:
    if isinstance(x, bool) or not isinstance(x, numbers.Integral):
        raise TypeError(f"{fn}: {name} must be an int, got {type(x).__name__}")
    value = int(x)
    if minimum is not None and value < minimum:
        raise ValueError(f"{fn}: {name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{fn}: {name} must be <= {maximum}, got {value}")
    return value


def _require_dtype(x: torch.Tensor, name: str, fn: str) -> None:
    if x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"{fn}: {name} has dtype {x.dtype}; supported dtypes are torch.bfloat16, "
            "torch.float16 and torch.float32"
        )


def round_float32(value: float) -> float:
    """A Python float rounded to the nearest float32 (inf beyond float32's range), in pure Python
    (struct), so that it also runs inside the custom ops' bodies under torch.compile."""
    try:
        return struct.unpack("<f", struct.pack("<f", value))[0]
    except (OverflowError, struct.error):  # beyond float32's range: float32 would hold inf
        return math.copysign(math.inf, value)


def float32_scale(value: float, fn: str) -> float:
    """value rounded to float32 (as a Python float), refused unless finite and > 0 there (also
    inside the custom ops, where torch.compile hands over the concrete value of a scale it
    traced symbolically)."""
    as_f32 = round_float32(value)
    if not math.isfinite(as_f32) or as_f32 <= 0.0:
        raise ValueError(
            f"{fn}: softmax_scale={value!r} is not a finite positive float32 value"
        )
    return as_f32


def check_softmax_scale(softmax_scale, head_dim, fn: str) -> float:
    """The scale as a float32-exact Python float; default 1/sqrt(head_dim).

    While torch.compile traces, the scale and head_dim may be symbolic (dynamic shapes, or a
    float argument that changed between calls): their values are then not read here (no guard,
    no tensor op), only the argument's type; the custom op that receives the scale checks it
    and rounds it to float32 when the graph runs (training.py's _spec_of), which gives the
    same float32 as here."""
    if softmax_scale is not None and (
        isinstance(softmax_scale, bool) or not isinstance(softmax_scale, (numbers.Real, torch.SymFloat))
    ):
        raise TypeError(
            f"{fn}: softmax_scale must be a float or None, got {type(softmax_scale).__name__}"
        )
    if torch.compiler.is_compiling():
        return 1.0 / math.sqrt(head_dim) if softmax_scale is None else softmax_scale
    if softmax_scale is None:
        value = 1.0 / math.sqrt(head_dim)
    else:
        try:
            value = float(softmax_scale)
        except OverflowError:
            raise ValueError(f"{fn}: softmax_scale={softmax_scale!r} is not a finite float") from None
        if not math.isfinite(value) or value <= 0.0:
            raise ValueError(f"{fn}: softmax_scale must be finite and > 0, got {value!r}")
    return float32_scale(value, fn)


def check_window_size(window_size, fn: str) -> tuple[int, int]:
    """FlashAttention's window_size=(left, right): query i sees keys i - left .. i + right, -1
    meaning unbounded on that side. Returns the C ABI's (window_before, window_after): left + 1
    and right + 1, 0 where unbounded."""
    if isinstance(window_size, torch.Tensor) or not isinstance(window_size, (tuple, list)):
        raise TypeError(f"{fn}: window_size must be a (left, right) tuple of ints, got "
                        f"{type(window_size).__name__}")
    if len(window_size) != 2:
        raise ValueError(f"{fn}: window_size must hold two ints (left, right), got "
                         f"{len(window_size)} values")
    sides = []
    for name, x in zip(("window_size[0]", "window_size[1]"), window_size):
        value = require_int(x, name, fn, minimum=-1, maximum=_INT32_MAX - 1)
        sides.append(value + 1)  # -1 -> 0: unbounded
    return sides[0], sides[1]


def check_sinks(sinks, spec: AttnSpec, fn: str):
    """None, or the sinks as a contiguous float32 tensor of (n_heads,) on the call's device (a
    differentiable conversion: gradients reach the caller's tensor in its dtype)."""
    if sinks is None:
        return None
    sinks = require_tensor(sinks, "sinks", fn)
    if not sinks.is_floating_point():
        raise TypeError(f"{fn}: sinks must be a floating tensor, got {sinks.dtype}")
    if tuple(sinks.shape) != (spec.n_heads,):
        raise ValueError(f"{fn}: sinks must have shape ({spec.n_heads},) (one per query head), "
                         f"got {tuple(sinks.shape)}")
    if sinks.device != spec.device:
        raise ValueError(f"{fn}: sinks is on {sinks.device} but q is on {spec.device}")
    return sinks.float().contiguous()


def check_cu_seqlens(cu_seqlens, total_tokens: int, device: torch.device, fn: str,
                     name: str = "cu_seqlens") -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """Validate a cumulative-length vector.

    Returns (on-device contiguous copy or the tensor itself, host copy, batch, longest).
    """
    cu = require_tensor(cu_seqlens, name, fn)
    if cu.dtype != torch.int32:
        raise TypeError(f"{fn}: {name} must have dtype torch.int32, got {cu.dtype}")
    if cu.dim() != 1:
        raise ValueError(f"{fn}: {name} must be 1-D, got shape {tuple(cu.shape)}")
    if cu.numel() < 2:
        raise ValueError(
            f"{fn}: {name} must hold batch + 1 >= 2 offsets, got {cu.numel()}"
        )
    if cu.device != device:
        raise ValueError(
            f"{fn}: {name} is on {cu.device} but the attention tensors are on {device}"
        )
    host = cu.detach().to("cpu", copy=True).contiguous()
    values = host.tolist()
    if values[0] != 0:
        raise ValueError(f"{fn}: {name} must start at 0, got {values[0]}")
    longest = 0
    for i in range(1, len(values)):
        length = values[i] - values[i - 1]
        if length < 0:
            raise ValueError(
                f"{fn}: {name} must be non-decreasing; {name}[{i}]={values[i]} < "
                f"{name}[{i - 1}]={values[i - 1]}"
            )
        longest = max(longest, length)
    if values[-1] != total_tokens:
        raise ValueError(
            f"{fn}: {name} must end at the token count {total_tokens} (dim 0 of q), "
            f"got {values[-1]}"
        )
    device_copy = cu if cu.is_contiguous() else cu.contiguous()
    return device_copy.detach(), host, len(values) - 1, longest


def _compiling() -> bool:
    compiler = getattr(torch, "compiler", None)
    return bool(compiler is not None and compiler.is_compiling())


def _no_host_reads(device: torch.device) -> bool:
    """Tracing under torch.compile, or capturing a CUDA graph on `device`'s current stream:
    device values (cu_seqlens) cannot be read on the host. (is_compiling first: dynamo cannot
    trace the capture query, and never has to.)"""
    return _compiling() or stream_capturing(device)


def _check_dim(x: torch.Tensor, name: str, ndim: int, layout: str, fn: str) -> None:
    if x.dim() != ndim:
        raise ValueError(
            f"{fn}: {name} must be {ndim}-D {layout}, got shape {tuple(x.shape)}"
        )


def validate_attention(
    q,
    k,
    v,
    *,
    fn: str,
    varlen: bool,
    cu_seqlens=None,
    max_seqlen=None,
    causal=False,
    softmax_scale=None,
    window_size=(-1, -1),
    names: tuple[str, str, str] = ("q", "k", "v"),
) -> AttnSpec:
    """Validate a self-attention call and describe it.

    Dense: q (B, S, H, D), k/v (B, S, Hkv, D). Varlen: q (T, H, D), k/v (T, Hkv, D) with
    cu_seqlens (B + 1,) int32. `names` lets callers whose roles differ (e.g. `out` in
    place of `q`) have errors name their own arguments.
    """
    qn, kn, vn = names
    q = require_tensor(q, qn, fn)
    k = require_tensor(k, kn, fn)
    v = require_tensor(v, vn, fn)
    causal = require_flag(causal, "causal", fn)
    window_before, window_after = check_window_size(window_size, fn)

    ndim = 3 if varlen else 4
    q_layout = "(total_tokens, heads, head_dim)" if varlen else "(batch, seqlen, heads, head_dim)"
    kv_layout = (
        "(total_tokens, kv_heads, head_dim)" if varlen else "(batch, seqlen, kv_heads, head_dim)"
    )
    _check_dim(q, qn, ndim, q_layout, fn)
    _check_dim(k, kn, ndim, kv_layout, fn)
    _check_dim(v, vn, ndim, kv_layout, fn)

    for x, n in ((q, qn), (k, kn), (v, vn)):
        _require_dtype(x, n, fn)
    for x, n in ((k, kn), (v, vn)):
        if x.dtype != q.dtype:
            raise TypeError(f"{fn}: {n} has dtype {x.dtype} but {qn} has {q.dtype}; they must match")

    for x, n in ((k, kn), (v, vn)):
        if x.device != q.device:
            raise ValueError(f"{fn}: {n} is on {x.device} but {qn} is on {q.device}")

    H, D = q.shape[-2], q.shape[-1]
    Hkv = k.shape[-2]
    lead = q.shape[:-2]  # (B, S) or (T,)
    for x, n in ((k, kn), (v, vn)):
        if x.shape[:-2] != lead:
            what = "(batch, seqlen)" if not varlen else "total_tokens"
            raise ValueError(
                f"{fn}: {n} has {what} {tuple(x.shape[:-2])} but {qn} has {tuple(lead)}; "
                "self-attention needs them equal"
            )
    if v.shape[-2] != Hkv:
        raise ValueError(f"{fn}: {vn} has {v.shape[-2]} heads but {kn} has {Hkv}; they must match")
    if D < 1 or D > FOLD_MAX_HEAD_DIM:
        raise ValueError(f"{fn}: {qn} head_dim must be in 1..{FOLD_MAX_HEAD_DIM}, got {D}")
    for x, n in ((k, kn), (v, vn)):
        if x.shape[-1] != D:
            raise ValueError(
                f"{fn}: {n} has head_dim {x.shape[-1]} but {qn} has {D}; they must match"
            )
    if H < 1:
        raise ValueError(f"{fn}: {qn} has zero heads")
    if Hkv < 1:
        raise ValueError(f"{fn}: {kn} has zero heads")
    if H % Hkv != 0:
        raise ValueError(
            f"{fn}: {qn} heads ({H}) must be a multiple of {kn} heads ({Hkv})"
        )
    if H > _INT32_MAX:
        raise ValueError(f"{fn}: {qn} has too many heads ({H})")

    if varlen and _no_host_reads(q.device):
        # Under torch.compile or a CUDA-graph capture the offsets are not readable on the host
        # (and a replay may run with other offsets), so the longest request is not known and a
        # caller's max_seqlen cannot be checked.
        # The packed length bounds every request: the kernels are launched for that many
        # query/key blocks per request (blocks past a request's end exit at once; they clamp
        # cu_seqlens on the device), which costs idle blocks, never a wrong or missing row.
        total = q.shape[0]
        cu = require_tensor(cu_seqlens, "cu_seqlens", fn)
        if cu.dtype != torch.int32 or cu.dim() != 1 or cu.device != q.device:
            raise TypeError(f"{fn}: cu_seqlens must be a 1-D torch.int32 tensor on {q.device}")
        if max_seqlen is not None:
            require_int(max_seqlen, "max_seqlen", fn, minimum=0, maximum=2**31 - 1)
        seqlen = max(int(total), 1)
        batch = cu.shape[0] - 1
        cu_dev, cu_host = cu, (cu if cu.device.type == "cpu" else None)
    elif varlen:
        total = q.shape[0]
        cu_dev, cu_host, batch, longest = check_cu_seqlens(cu_seqlens, total, q.device, fn)
        if max_seqlen is not None:
            given = require_int(max_seqlen, "max_seqlen", fn, minimum=0, maximum=2**31 - 1)
            if given < longest:
                raise ValueError(
                    f"{fn}: max_seqlen={given} is shorter than the longest sequence in "
                    f"cu_seqlens ({longest})"
                )
        seqlen = longest
    else:
        if cu_seqlens is not None:  # only reachable through internal callers
            raise ValueError(f"{fn}: cu_seqlens must be None for dense inputs")
        batch, seqlen = q.shape[0], q.shape[1]
        if batch < 1:
            raise ValueError(f"{fn}: {qn} has an empty batch (batch size 0)")
        if batch > _INT32_MAX or seqlen > _INT32_MAX:
            raise ValueError(f"{fn}: {qn} batch or seqlen exceeds int32")
        total = batch * seqlen
        cu_dev = cu_host = None

    scale = check_softmax_scale(softmax_scale, D, fn)
    # Causal masking already hides every key after the query: the window's after side is moot.
    # (A side longer than the sequences is kept as given: which kernel instance runs may depend
    # on the arguments, never on the lengths in the batch, so that a request's bits are the same
    # alone and in any batch.)
    if causal:
        window_after = 0
    return AttnSpec(
        varlen=varlen,
        batch=int(batch),
        seqlen=int(seqlen),
        total_tokens=int(total),
        n_heads=int(H),
        n_kv_heads=int(Hkv),
        head_dim=int(D),
        dtype=q.dtype,
        device=q.device,
        causal=causal,
        softmax_scale=scale,
        cu_seqlens=cu_dev,
        cu_seqlens_host=cu_host,
        window_before=window_before,
        window_after=window_after,
    )


def validate_like(x, name: str, ref: torch.Tensor, ref_name: str, fn: str) -> torch.Tensor:
    """x must be a tensor with ref's shape, dtype and device."""
    x = require_tensor(x, name, fn)
    if x.dtype != ref.dtype:
        raise TypeError(f"{fn}: {name} has dtype {x.dtype} but {ref_name} has {ref.dtype}")
    if x.shape != ref.shape:
        raise ValueError(
            f"{fn}: {name} has shape {tuple(x.shape)} but {ref_name} has {tuple(ref.shape)}"
        )
    if x.device != ref.device:
        raise ValueError(f"{fn}: {name} is on {x.device} but {ref_name} is on {ref.device}")
    return x

