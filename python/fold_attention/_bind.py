"""Turning validated torch tensors into the C ABI's structures.

The ABI needs a contiguous last dimension and takes every other stride as given (in
elements), in [request, token, head, dim] nesting order. A tensor whose layout the
library accepts is passed through without a copy; any other (a strided last dimension,
as in FlashAttention, but also head-major storage or zero-stride expanded views) is
copied once to a contiguous tensor.
"""

from __future__ import annotations

import ctypes

import torch

from ._lib import DType, FoldAttnProblem, FoldTensor
from ._validate import AttnSpec

__all__ = [
    "DTYPE_CODES",
    "abi_layout",
    "fold_tensor",
    "float_ptr",
    "make_problem",
]

DTYPE_CODES = {
    torch.float32: DType.F32,
    torch.float16: DType.F16,
    torch.bfloat16: DType.BF16,
}

_P_FLOAT = ctypes.POINTER(ctypes.c_float)
_P_INT32 = ctypes.POINTER(ctypes.c_int32)


def _strides_of(shape, stride, varlen: bool) -> tuple[int, int, int]:
    """_abi_strides from x.shape and x.stride(), each read once (the calls cost host time on
    every attention call)."""
    d, heads, tokens = shape[-1], shape[-2], shape[-3]
    head_stride = stride[-2] if heads > 1 else d
    token_stride = stride[-3] if tokens > 1 else (heads - 1) * head_stride + d
    if varlen:
        return 0, token_stride, head_stride
    batch_stride = stride[0] if shape[0] > 1 else tokens * token_stride
    return batch_stride, token_stride, head_stride


def _accepts(shape, stride, strides, varlen: bool) -> bool:
    """_abi_accepts from the shape, the stride and _strides_of's result."""
    d, heads = shape[-1], shape[-2]
    if d > 1 and stride[-1] != 1:
        return False
    batch_stride, token_stride, head_stride = strides
    if heads > 1 and head_stride < d:
        return False
    if token_stride < (heads - 1) * head_stride + d:
        return False
    if not varlen and shape[0] > 1 and batch_stride < shape[1] * token_stride:
        return False
    return True


def _abi_strides(x: torch.Tensor, varlen: bool) -> tuple[int, int, int]:
    """(batch_stride, token_stride, head_stride) of a [B, S, heads, D] / [T, heads, D] view.

    A dimension of size 1 is never stepped over, so its stride is meaningless (torch may
    report any value); it is replaced by the value a tightly packed tensor would have, so
    that it cannot trip the library's layout checks.
    """
    return _strides_of(x.shape, x.stride(), varlen)


def _abi_accepts(x: torch.Tensor, varlen: bool) -> bool:
    """Whether the library takes x's strides as they are.

    The library reads a view whose last dimension is contiguous and whose heads, tokens
    and requests are laid out in that nesting order without overlap (a FlashAttention
    layout, padded or sliced as one likes). Other layouts (head-major storage, expanded
    views with a zero stride) are copied.
    """
    shape, stride = x.shape, x.stride()
    return _accepts(shape, stride, _strides_of(shape, stride, varlen), varlen)


def abi_layout(x: torch.Tensor, varlen: bool) -> torch.Tensor:
    """x itself when the library accepts its layout, else a contiguous copy."""
    if x.numel() == 0 or _abi_accepts(x, varlen):
        return x
    return x.contiguous()


def fold_tensor(x: torch.Tensor, varlen: bool) -> FoldTensor:
    """A fold_tensor_t over a [B, S, heads, D] (dense) or [T, heads, D] (varlen) tensor."""
    shape, stride = x.shape, x.stride()
    strides = _strides_of(shape, stride, varlen)
    if not _accepts(shape, stride, strides, varlen) and x.numel() != 0:
        raise AssertionError("layout must pass abi_layout first")
    return FoldTensor(x.data_ptr(), *strides)


def float_ptr(x: torch.Tensor):
    assert x.dtype == torch.float32 and x.is_contiguous()
    return ctypes.cast(x.data_ptr(), _P_FLOAT)


def make_problem(spec: AttnSpec, host: bool, sinks=None) -> FoldAttnProblem:
    """The fold_attn_problem_t of `spec`; cu_seqlens points at host or device memory; sinks
    (None, or a contiguous float32 tensor of n_heads on the call's device) as given.

    The caller keeps `spec` (and so the cu_seqlens tensors) and sinks alive across the C call.
    """
    if spec.varlen:
        cu = spec.cu_seqlens_host if host else spec.cu_seqlens
        assert cu is not None and cu.dtype == torch.int32 and cu.is_contiguous()
        cu_ptr = ctypes.cast(cu.data_ptr(), _P_INT32)
    else:
        cu_ptr = _P_INT32()  # NULL
    return FoldAttnProblem(
        batch=spec.batch,
        seqlen=spec.seqlen,
        cu_seqlens=cu_ptr,
        total_tokens=spec.total_tokens,
        n_heads=spec.n_heads,
        n_kv_heads=spec.n_kv_heads,
        head_dim=spec.head_dim,
        dtype=DTYPE_CODES[spec.dtype],
        causal=1 if spec.causal else 0,
        softmax_scale=spec.softmax_scale,
        window_before=spec.window_before,
        window_after=spec.window_after,
        sinks=None if sinks is None else sinks.data_ptr(),
    )
