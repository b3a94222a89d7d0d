"""Low-level access to single library passes (used by tests and benchmarks).

bwd_preprocess runs the backward's first pass on its own: Delta_i = dO_i . O_i and the
per (request, KV head) bounds of the integer grid (ALGORITHMS.md section 5).
"""

from __future__ import annotations

import torch

from . import _lib
from ._bind import abi_layout, fold_tensor, float_ptr, make_problem
from ._device import device_scope, require_cuda_kernels, stream_handle
from ._validate import validate_attention, validate_like

__all__ = ["bwd_preprocess"]


def bwd_preprocess(
    k, v, out, dout, cu_seqlens=None, max_seqlen=None, causal=False, softmax_scale=None
):
    """Run fold_bwd_preprocess_{cpu,cuda} on the device of the inputs.

    Args:
        k, v: dense (batch, seqlen, n_kv_heads, head_dim) or, with cu_seqlens,
            packed (total_tokens, n_kv_heads, head_dim).
        out, dout: the forward output and its gradient, dense (batch, seqlen, n_heads,
            head_dim) or packed (total_tokens, n_heads, head_dim); same dtype as k, v.
        cu_seqlens: None (dense) or int32 (batch + 1,) on the inputs' device.
        causal, softmax_scale: part of the problem description; the preprocess result
            does not depend on them.

    Returns:
        (delta, bounds): delta float32 (n_heads, total_tokens); bounds float32
        (batch, n_kv_heads, 4) in the order max|K|, max|V|, max||dO_i||, max|Delta_i|.
        CUDA inputs run on torch's current stream of their device.
    """
    fn = "bwd_preprocess"
    varlen = cu_seqlens is not None
    spec = validate_attention(
        out,
        k,
        v,
        fn=fn,
        varlen=varlen,
        cu_seqlens=cu_seqlens,
        max_seqlen=max_seqlen,
        causal=causal,
        softmax_scale=softmax_scale,
        names=("out", "k", "v"),
    )
    validate_like(dout, "dout", out, "out", fn)
    k, v, out, dout = (abi_layout(x, varlen) for x in (k, v, out, dout))

    device = spec.device
    delta = torch.empty((spec.n_heads, spec.total_tokens), dtype=torch.float32, device=device)
    bounds = torch.empty(
        (spec.batch, spec.n_kv_heads, _lib.FOLD_BWD_BOUNDS), dtype=torch.float32, device=device
    )
    args = (
        fold_tensor(k, varlen),
        fold_tensor(v, varlen),
        fold_tensor(out, varlen),
        fold_tensor(dout, varlen),
        float_ptr(delta),
        float_ptr(bounds),
    )
    lib = _lib.library()
    if device.type == "cpu":
        problem = make_problem(spec, host=True)
        _lib.check(lib.fold_bwd_preprocess_cpu(problem, *args), "fold_bwd_preprocess_cpu")
    elif device.type == "cuda":
        require_cuda_kernels(device, fn)
        problem = make_problem(spec, host=False)
        with device_scope(device):
            status = lib.fold_bwd_preprocess_cuda(problem, *args, stream_handle(device))
        _lib.check(status, "fold_bwd_preprocess_cuda")
    else:
        raise NotImplementedError(f"{fn}: no kernels for device type {device.type!r}")
    return delta, bounds
