"""Training attention: fold_attn_func (dense) and fold_attn_varlen_func (packed).

The forward and the deterministic backward run in the library: the CPU reference
backend for CPU tensors, the CUDA kernels (bf16/fp16, head_dim 64/96/128/256) for CUDA
tensors, on torch's current stream. Outputs and workspaces are allocated through torch. The LSE output
is not differentiable: gradients flow through `out` only.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from . import _lib
from ._bind import abi_layout, fold_tensor, float_ptr, make_problem
from ._validate import AttnSpec, require_flag, validate_attention

__all__ = ["fold_attn_func", "fold_attn_varlen_func"]

# Head dimensions the CUDA training kernels are compiled for.
CUDA_HEAD_DIMS = (64, 96, 128, 256)


def _require_backend(spec: AttnSpec, fn: str) -> None:
    if spec.device.type == "cpu":
        return
    if spec.device.type == "cuda":
        if spec.dtype not in (torch.bfloat16, torch.float16):
            raise NotImplementedError(
                f"{fn}: the CUDA training kernels take bfloat16 or float16, got {spec.dtype} "
                "(use CPU tensors for the float32 reference)"
            )
        if spec.head_dim not in CUDA_HEAD_DIMS:
            raise NotImplementedError(
                f"{fn}: the CUDA training kernels take head_dim in {CUDA_HEAD_DIMS}, got "
                f"{spec.head_dim} (use CPU tensors for other head dimensions)"
            )
        return
    raise NotImplementedError(
        f"{fn}: no kernels for device type {spec.device.type!r}; use CPU tensors"
    )


def _cuda_layout(x: torch.Tensor, varlen: bool) -> torch.Tensor:
    """abi_layout, plus what the CUDA kernels need: 16-byte aligned data and strides that
    are multiples of 8 elements (16-byte loads); anything else is copied once."""
    x = abi_layout(x, varlen)
    if x.numel() == 0:
        return x
    strides = x.stride()[:-1]
    if x.data_ptr() % 16 == 0 and all(st % 8 == 0 for st in strides):
        return x
    x = x.contiguous()
    return x if x.data_ptr() % 16 == 0 else x.clone()


def _stream(device: torch.device):
    return torch.cuda.current_stream(device).cuda_stream


def _forward(spec: AttnSpec, q, k, v) -> tuple[torch.Tensor, torch.Tensor]:
    """out (q's shape and dtype, contiguous) and lse float32 (n_heads, total_tokens)."""
    out = torch.empty(q.shape, dtype=spec.dtype, device=spec.device)
    lse = torch.empty((spec.n_heads, spec.total_tokens), dtype=torch.float32, device=spec.device)
    if spec.total_tokens == 0:
        return out, lse
    lib = _lib.library()
    if spec.device.type == "cuda":
        problem = make_problem(spec, host=False)
        with torch.cuda.device(spec.device):
            status = lib.fold_fwd_cuda(
                problem,
                fold_tensor(q, spec.varlen),
                fold_tensor(k, spec.varlen),
                fold_tensor(v, spec.varlen),
                fold_tensor(out, spec.varlen),
                float_ptr(lse),
                _stream(spec.device),
            )
        _lib.check(status, "fold_fwd_cuda")
        return out, lse
    problem = make_problem(spec, host=True)
    status = lib.fold_fwd_cpu(
        problem,
        fold_tensor(q, spec.varlen),
        fold_tensor(k, spec.varlen),
        fold_tensor(v, spec.varlen),
        fold_tensor(out, spec.varlen),
        float_ptr(lse),
    )
    _lib.check(status, "fold_fwd_cpu")
    return out, lse


def _backward(spec: AttnSpec, q, k, v, out, dout, lse):
    dq = torch.empty(q.shape, dtype=spec.dtype, device=spec.device)
    dk = torch.empty(k.shape, dtype=spec.dtype, device=spec.device)
    dv = torch.empty(v.shape, dtype=spec.dtype, device=spec.device)
    if spec.total_tokens == 0:
        return dq, dk, dv
    lib = _lib.library()
    if spec.device.type == "cuda":
        problem = make_problem(spec, host=False)
        size = int(lib.fold_bwd_cuda_workspace_size(problem))
        workspace = torch.empty(max(size, 1), dtype=torch.uint8, device=spec.device)
        with torch.cuda.device(spec.device):
            status = lib.fold_bwd_cuda(
                problem,
                *(fold_tensor(x, spec.varlen) for x in (q, k, v, out, dout)),
                float_ptr(lse),
                *(fold_tensor(x, spec.varlen) for x in (dq, dk, dv)),
                workspace.data_ptr(),
                size,
                _stream(spec.device),
            )
        _lib.check(status, "fold_bwd_cuda")
        return dq, dk, dv
    problem = make_problem(spec, host=True)
    status = lib.fold_bwd_cpu(
        problem,
        fold_tensor(q, spec.varlen),
        fold_tensor(k, spec.varlen),
        fold_tensor(v, spec.varlen),
        fold_tensor(out, spec.varlen),
        fold_tensor(dout, spec.varlen),
        float_ptr(lse),
        fold_tensor(dq, spec.varlen),
        fold_tensor(dk, spec.varlen),
        fold_tensor(dv, spec.varlen),
    )
    _lib.check(status, "fold_bwd_cpu")
    return dq, dk, dv


class _FoldAttention(torch.autograd.Function):
    """out, lse = attention(q, k, v); lse is float32 (n_heads, total_tokens)."""

    @staticmethod
    def forward(ctx, q, k, v, spec: AttnSpec):
        out, lse = _forward(spec, q, k, v)
        ctx.spec = spec
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    @once_differentiable
    def backward(ctx, dout, _dlse):
        # _dlse is ignored: the LSE is marked non-differentiable.
        q, k, v, out, lse = ctx.saved_tensors
        spec: AttnSpec = ctx.spec
        if dout is None:
            dout = torch.zeros_like(out)
        layout = _cuda_layout if spec.device.type == "cuda" else abi_layout
        dout = layout(dout, spec.varlen)
        dq, dk, dv = _backward(spec, q, k, v, out, dout, lse)
        need_q, need_k, need_v = ctx.needs_input_grad[:3]
        return (dq if need_q else None, dk if need_k else None, dv if need_v else None, None)


def _run(spec: AttnSpec, q, k, v, return_lse: bool, fn: str):
    _require_backend(spec, fn)
    layout = _cuda_layout if spec.device.type == "cuda" else abi_layout
    q, k, v = (layout(x, spec.varlen) for x in (q, k, v))
    out, lse = _FoldAttention.apply(q, k, v, spec)
    if not return_lse:
        return out
    if not spec.varlen:
        # (H, B*S) -> (B, H, S), FlashAttention's dense LSE layout (a view).
        lse = lse.view(spec.n_heads, spec.batch, spec.seqlen).permute(1, 0, 2)
    return out, lse


def fold_attn_func(q, k, v, causal=False, softmax_scale=None, return_lse=False):
    """Self-attention over a dense batch.

    Args:
        q: (batch, seqlen, n_heads, head_dim), bfloat16, float16 or float32.
        k, v: (batch, seqlen, n_kv_heads, head_dim), same dtype and device as q;
            n_heads must be a multiple of n_kv_heads (GQA/MQA).
        causal: mask keys after the query (key j > query i).
        softmax_scale: defaults to 1 / sqrt(head_dim).
        return_lse: also return the natural-log LSE, float32 (batch, n_heads, seqlen),
            which is not differentiable.

    Returns:
        out (q's shape and dtype), or (out, lse) when return_lse is True. The backward
        gives bit-identical gradients across repeats, batch composition and packing.
    """
    fn = "fold_attn_func"
    spec = validate_attention(
        q, k, v, fn=fn, varlen=False, causal=causal, softmax_scale=softmax_scale
    )
    return_lse = require_flag(return_lse, "return_lse", fn)
    return _run(spec, q, k, v, return_lse, fn)


def fold_attn_varlen_func(
    q, k, v, cu_seqlens, max_seqlen=None, causal=False, softmax_scale=None, return_lse=False
):
    """Self-attention over packed variable-length sequences.

    Args:
        q: (total_tokens, n_heads, head_dim); k, v: (total_tokens, n_kv_heads, head_dim).
        cu_seqlens: int32 (batch + 1,), on q's device: 0, then non-decreasing offsets
            ending at total_tokens. Empty sequences are allowed.
        max_seqlen: optional upper bound on the sequence lengths (checked, else computed).
        causal, softmax_scale: as in fold_attn_func.
        return_lse: also return the LSE, float32 (n_heads, total_tokens), not
            differentiable.
    """
    fn = "fold_attn_varlen_func"
    spec = validate_attention(
        q,
        k,
        v,
        fn=fn,
        varlen=True,
        cu_seqlens=cu_seqlens,
        max_seqlen=max_seqlen,
        causal=causal,
        softmax_scale=softmax_scale,
    )
    return_lse = require_flag(return_lse, "return_lse", fn)
    return _run(spec, q, k, v, return_lse, fn)
