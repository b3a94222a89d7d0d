"""Training attention: fold_attn_func (dense) and fold_attn_varlen_func (packed).

The forward and the deterministic backward run in the library: the CPU reference
backend for CPU tensors, the CUDA kernels (bf16/fp16, head_dim 64/96/128/256) for CUDA
tensors, on torch's current stream. Outputs and workspaces are allocated through torch. The LSE output
is not differentiable: gradients flow through `out` only.
"""

from __future__ import annotations

import os

import torch

from . import _lib
from ._bind import abi_layout, fold_tensor, float_ptr, make_problem
from ._device import device_scope, require_cuda_kernels, stream_handle
from ._validate import (SUPPORTED_DTYPES, AttnSpec, check_sinks, float32_scale, require_flag,
                        validate_attention)

__all__ = ["fold_attn_func", "fold_attn_varlen_func"]

# Head dimensions the CUDA training kernels are compiled for.
CUDA_HEAD_DIMS = (64, 96, 128, 256)


def _require_backend(spec: AttnSpec, fn: str) -> None:
    if spec.device.type == "cpu":
        return
    if spec.device.type == "cuda":
        require_cuda_kernels(spec.device, fn)
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


# FOLD_BOUND_MAX_ABS_K / _V of fold_attention.h: the slots of the bounds the forward can take.
BWD_BOUNDS = 4


def _forward(spec: AttnSpec, q, k, v, kv_bounds: bool = False, sinks=None):
    """out (q's shape and dtype, contiguous), lse float32 (n_heads, total_tokens) and, with
    kv_bounds (CUDA only), the K / V bounds float32 (batch, n_kv_heads, 4) for the backward
    (fold_fwd_cuda_kv_bounds); else None."""
    out = torch.empty(q.shape, dtype=spec.dtype, device=spec.device)
    lse = torch.empty((spec.n_heads, spec.total_tokens), dtype=torch.float32, device=spec.device)
    bounds = None
    if kv_bounds:
        # The library writes every entry (zeros included); with no tokens it is not called.
        alloc = torch.empty if spec.total_tokens > 0 else torch.zeros
        bounds = alloc((spec.batch, spec.n_kv_heads, BWD_BOUNDS), dtype=torch.float32,
                       device=spec.device)
    if spec.total_tokens == 0:
        return out, lse, bounds
    lib = _lib.library()
    args = [fold_tensor(x, spec.varlen) for x in (q, k, v, out)] + [float_ptr(lse)]
    if spec.device.type == "cuda":
        problem = make_problem(spec, host=False, sinks=sinks)
        with device_scope(spec.device):
            if bounds is not None:
                status = lib.fold_fwd_cuda_kv_bounds(problem, *args, float_ptr(bounds),
                                                     stream_handle(spec.device))
                _lib.check(status, "fold_fwd_cuda_kv_bounds")
            else:
                status = lib.fold_fwd_cuda(problem, *args, stream_handle(spec.device))
                _lib.check(status, "fold_fwd_cuda")
    else:
        if bounds is not None:
            raise ValueError("kv_bounds: the forward takes the K / V bounds on CUDA only")
        _lib.check(lib.fold_fwd_cpu(make_problem(spec, host=True, sinks=sinks), *args),
                   "fold_fwd_cpu")
    return out, lse, bounds


def _backward(spec: AttnSpec, q, k, v, out, dout, lse, kv_bounds=None):
    dq = torch.empty(q.shape, dtype=spec.dtype, device=spec.device)
    dk = torch.empty(k.shape, dtype=spec.dtype, device=spec.device)
    dv = torch.empty(v.shape, dtype=spec.dtype, device=spec.device)
    if spec.total_tokens == 0:
        return dq, dk, dv
    lib = _lib.library()
    args = (
        [fold_tensor(x, spec.varlen) for x in (q, k, v, out, dout)]
        + [float_ptr(lse)]
        + [fold_tensor(x, spec.varlen) for x in (dq, dk, dv)]
    )
    if spec.device.type == "cuda":
        problem = make_problem(spec, host=False)
        size = int(lib.fold_bwd_cuda_workspace_size(problem))
        workspace = torch.empty(max(size, 1), dtype=torch.uint8, device=spec.device)
        with device_scope(spec.device):
            if kv_bounds is not None:
                status = lib.fold_bwd_cuda_kv_bounds(problem, *args, float_ptr(kv_bounds),
                                                     workspace.data_ptr(), size,
                                                     stream_handle(spec.device))
                _lib.check(status, "fold_bwd_cuda_kv_bounds")
            else:
                status = lib.fold_bwd_cuda(problem, *args, workspace.data_ptr(), size,
                                           stream_handle(spec.device))
                _lib.check(status, "fold_bwd_cuda")
    else:
        _lib.check(lib.fold_bwd_cpu(make_problem(spec, host=True), *args), "fold_bwd_cpu")
    return dq, dk, dv


# ---- torch.library custom ops -------------------------------------------------------------
# fold_attention::fwd / ::bwd are registered custom ops with fake (meta) implementations and
# an autograd formula, so torch.compile(fullgraph=True) traces through them without graph
# breaks and CUDA graphs capture them (no host syncs inside; outputs and workspaces come from
# torch's allocator; work goes to torch's current stream).


def _check_op_tensors(fn: str, q, k, v, cu_seqlens, out=None, dout=None, lse=None) -> None:
    """Metadata checks (no host sync) for direct calls of the ops, which skip the public
    functions' validation: a mismatched shape here would let the library read out of bounds."""
    varlen = cu_seqlens is not None
    nd = 3 if varlen else 4
    if q.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{fn}: q has dtype {q.dtype}; supported dtypes are torch.bfloat16, "
                        "torch.float16 and torch.float32")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dim() != nd or x.dtype != q.dtype or x.device != q.device:
            raise ValueError(f"{fn}: {name} must be {nd}-D with q's dtype and device")
    if (k.shape != v.shape or k.shape[:-2] != q.shape[:-2] or k.shape[-1] != q.shape[-1]
            or k.shape[-2] < 1 or q.shape[-2] % k.shape[-2] != 0):
        raise ValueError(f"{fn}: q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)} "
                         "do not form an attention call")
    if varlen and (cu_seqlens.dtype != torch.int32 or cu_seqlens.dim() != 1
                   or cu_seqlens.shape[0] < 2 or cu_seqlens.device != q.device):
        raise ValueError(f"{fn}: cu_seqlens must be 1-D int32 with >= 2 entries on q's device")
    for name, x in (("out", out), ("dout", dout)):
        if x is not None and (x.shape != q.shape or x.dtype != q.dtype or x.device != q.device):
            raise ValueError(f"{fn}: {name} must match q's shape, dtype and device")
    if lse is not None:
        total = q.shape[0] if varlen else q.shape[0] * q.shape[1]
        if tuple(lse.shape) != (q.shape[-2], total) or lse.dtype != torch.float32:
            raise ValueError(f"{fn}: lse must be float32 of shape {(q.shape[-2], total)} "
                             "(the layout fold_attention::fwd returns)")


def _spec_of(q, k, v, cu_seqlens, seqlen: int, causal: bool, softmax_scale: float,
             fn: str = "fold_attention", window_before: int = 0, window_after: int = 0) -> AttnSpec:
    """The AttnSpec of an already validated call, rebuilt from its tensors (no host sync). The
    scale is checked and rounded to float32 here too: under torch.compile a symbolic scale
    reaches the op unchecked (check_softmax_scale)."""
    varlen = cu_seqlens is not None
    if varlen:
        if not 0 <= int(seqlen) <= 2**31 - 1:  # (the C ABI's int32: a larger one would wrap)
            raise ValueError(f"{fn}: seqlen must be in [0, 2**31 - 1], got {seqlen}")
        batch, total = cu_seqlens.shape[0] - 1, q.shape[0]
        cu_host = cu_seqlens.contiguous() if cu_seqlens.device.type == "cpu" else None
    else:
        batch, seqlen, total = q.shape[0], q.shape[1], q.shape[0] * q.shape[1]
        cu_host = None
    for name, side in (("window_before", window_before), ("window_after", window_after)):
        if not 0 <= int(side) <= 2**31 - 1:  # (the C ABI's int32; 0: unbounded)
            raise ValueError(f"{fn}: {name} must be in [0, 2**31 - 1], got {side}")
    return AttnSpec(
        varlen=varlen, batch=int(batch), seqlen=int(seqlen), total_tokens=int(total),
        n_heads=int(q.shape[-2]), n_kv_heads=int(k.shape[-2]), head_dim=int(q.shape[-1]),
        dtype=q.dtype, device=q.device, causal=bool(causal),
        softmax_scale=float32_scale(float(softmax_scale), fn),
        cu_seqlens=None if cu_seqlens is None else cu_seqlens.contiguous(), cu_seqlens_host=cu_host,
        window_before=int(window_before), window_after=int(window_after),
    )


def _layout_for(device: torch.device):
    return _cuda_layout if device.type == "cuda" else abi_layout


@torch.library.custom_op("fold_attention::fwd", mutates_args=())
def _fwd_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor | None,
            seqlen: int, causal: bool, softmax_scale: float, window_before: int = 0,
            window_after: int = 0, sinks: torch.Tensor | None = None
            ) -> tuple[torch.Tensor, torch.Tensor]:
    _check_op_tensors("fold_attention::fwd", q, k, v, cu_seqlens)
    spec = _spec_of(q, k, v, cu_seqlens, seqlen, causal, softmax_scale, "fold_attention::fwd",
                    window_before, window_after)
    sinks = _op_sinks(sinks, spec, "fold_attention::fwd")
    layout = _layout_for(spec.device)
    q, k, v = (layout(x, spec.varlen) for x in (q, k, v))
    out, lse, _ = _forward(spec, q, k, v, sinks=sinks)
    return out, lse


@_fwd_op.register_fake
def _fwd_fake(q, k, v, cu_seqlens, seqlen, causal, softmax_scale, window_before=0, window_after=0,
              sinks=None):
    total = q.shape[0] if cu_seqlens is not None else q.shape[0] * q.shape[1]
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((q.shape[-2], total), dtype=torch.float32, device=q.device)
    return out, lse


# The forward of a training step on CUDA: fwd's out and lse (the same bits) and the K / V
# bounds that spare the backward its own read of K and V (fold_fwd_cuda_kv_bounds).
@torch.library.custom_op("fold_attention::fwd_train", mutates_args=())
def _fwd_train_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  cu_seqlens: torch.Tensor | None, seqlen: int, causal: bool,
                  softmax_scale: float, window_before: int = 0, window_after: int = 0,
                  sinks: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check_op_tensors("fold_attention::fwd_train", q, k, v, cu_seqlens)
    if q.device.type != "cuda":
        raise ValueError("fold_attention::fwd_train: q must be a CUDA tensor (use "
                         "fold_attention::fwd on the CPU)")
    spec = _spec_of(q, k, v, cu_seqlens, seqlen, causal, softmax_scale, "fold_attention::fwd_train",
                    window_before, window_after)
    sinks = _op_sinks(sinks, spec, "fold_attention::fwd_train")
    q, k, v = (_cuda_layout(x, spec.varlen) for x in (q, k, v))
    return _forward(spec, q, k, v, kv_bounds=True, sinks=sinks)


@_fwd_train_op.register_fake
def _fwd_train_fake(q, k, v, cu_seqlens, seqlen, causal, softmax_scale, window_before=0,
                    window_after=0, sinks=None):
    out, lse = _fwd_fake(q, k, v, cu_seqlens, seqlen, causal, softmax_scale)
    batch = cu_seqlens.shape[0] - 1 if cu_seqlens is not None else q.shape[0]
    bounds = torch.empty((batch, k.shape[-2], BWD_BOUNDS), dtype=torch.float32, device=q.device)
    return out, lse, bounds


@torch.library.custom_op("fold_attention::bwd", mutates_args=())
def _bwd_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
            dout: torch.Tensor, lse: torch.Tensor, cu_seqlens: torch.Tensor | None, seqlen: int,
            causal: bool, softmax_scale: float, kv_bounds: torch.Tensor | None = None,
            window_before: int = 0, window_after: int = 0
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check_op_tensors("fold_attention::bwd", q, k, v, cu_seqlens, out, dout, lse)
    spec = _spec_of(q, k, v, cu_seqlens, seqlen, causal, softmax_scale, "fold_attention::bwd",
                    window_before, window_after)
    if kv_bounds is not None:
        want = (spec.batch, spec.n_kv_heads, BWD_BOUNDS)
        if (tuple(kv_bounds.shape) != want or kv_bounds.dtype != torch.float32
                or kv_bounds.device != q.device):
            raise ValueError(f"fold_attention::bwd: kv_bounds must be float32 of shape {want} on "
                             "q's device (what fold_attention::fwd_train returns)")
        if spec.device.type != "cuda":
            kv_bounds = None  # the CPU reference computes its own
    layout = _layout_for(spec.device)
    q, k, v, out, dout = (layout(x, spec.varlen) for x in (q, k, v, out, dout))
    return _backward(spec, q, k, v, out, dout, lse.contiguous(),
                     None if kv_bounds is None else kv_bounds.contiguous())


@_bwd_op.register_fake
def _bwd_fake(q, k, v, out, dout, lse, cu_seqlens, seqlen, causal, softmax_scale,
              kv_bounds=None, window_before=0, window_after=0):
    return (torch.empty(q.shape, dtype=q.dtype, device=q.device),
            torch.empty(k.shape, dtype=k.dtype, device=k.device),
            torch.empty(v.shape, dtype=v.dtype, device=v.device))


def _op_sinks(sinks, spec: AttnSpec, fn: str):
    """The sinks a direct op call hands over, checked (metadata only: no host sync)."""
    if sinks is None:
        return None
    if (sinks.dtype != torch.float32 or tuple(sinks.shape) != (spec.n_heads,)
            or sinks.device != spec.device):
        raise ValueError(f"{fn}: sinks must be float32 of shape ({spec.n_heads},) on q's device")
    return sinks.contiguous()


def _sinks_grad(sinks, out, dout, lse):
    """d sinks[h] = -sum_i exp(sinks[h] - lse_i) Delta_i over head h's rows, Delta_i = dO_i . O_i,
    in float32 by torch's reductions (deterministic run to run; a sum over the whole batch, like
    any parameter's gradient). sinks[h] <= lse_i, so the exponential never overflows."""
    heads = lse.shape[0]
    delta = (dout.float() * out.float()).sum(-1).reshape(-1, heads).t()  # (heads, rows), lse's
    return -(torch.exp(sinks[:, None] - lse) * delta).sum(1)


def _setup_context(ctx, inputs, output):
    q, k, v, cu_seqlens, seqlen, causal, softmax_scale, window_before, window_after, sinks = inputs
    out, lse = output[0], output[1]
    bounds = output[2] if len(output) > 2 else None
    ctx.save_for_backward(q, k, v, out, lse, cu_seqlens, bounds, sinks)
    ctx.options = (seqlen, causal, softmax_scale)
    ctx.window = (window_before, window_after)
    ctx.mark_non_differentiable(*output[1:])


def _fwd_backward(ctx, dout, *_unused):
    # The grads of lse (and of the bounds) are ignored: neither is differentiable.
    q, k, v, out, lse, cu_seqlens, bounds, sinks = ctx.saved_tensors
    if dout is None:
        dout = torch.zeros_like(out)
    # The backward takes the forward's LSE, which holds the sinks' mass: dq, dk, dv need nothing
    # else from them.
    dq, dk, dv = _bwd_op(q, k, v, out, dout, lse, cu_seqlens, *ctx.options, bounds, *ctx.window)
    need = ctx.needs_input_grad  # (one per input passed: trailing defaults are not counted)
    dsinks = None
    if len(need) > 9 and need[9]:
        # Without grad: the LSE is not differentiable, so torch's derivative of this formula
        # would miss the LSE's dependence on the sinks (a wrong second derivative, silently).
        # Under create_graph the sinks' gradient refuses a second differentiation, as dq, dk
        # and dv do (bwd has no autograd formula).
        with torch.no_grad():
            dsinks = _sinks_grad(sinks, out, dout, lse)
        if torch.is_grad_enabled():
            dsinks, = _NoDoubleBackward.apply(1, dsinks, sinks, out, dout)
    grads = (dq if need[0] else None, dk if need[1] else None, dv if need[2] else None,
             None, None, None, None, None, None, dsinks)
    return grads[:len(need)]


_fwd_op.register_autograd(_fwd_backward, setup_context=_setup_context)
_fwd_train_op.register_autograd(_fwd_backward, setup_context=_setup_context)


# Where the forward takes the K / V bounds by default: one query head per KV head (K and V are
# as large as Q, and the backward's own read of them costs 3-4% of its time) at the head dims
# measured. The scan costs the forward 1-3% there (session 28, notes/training_kernels.md:
# forward + backward +0.9 to +2.1% at the G 1 shapes); with KV groups the saved read is a
# quarter or less and the step came out even (-2.4 to +3.0%, within the noise), so it stays off.
KV_BOUNDS_HEAD_DIMS = (64, 128)


def _train_forward(spec: AttnSpec, q, k, v) -> bool:
    """Whether this call's forward should also take the K / V bounds for the backward: on CUDA,
    when autograd will need the gradients, by the rule above. FOLD_TRAIN_KV_BOUNDS (read at
    every call, outside torch.compile) overrides the rule: 1 always, 0 never (A/B runs, tests)."""
    if spec.device.type != "cuda":
        return False
    if not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)):
        return False
    env = "" if torch.compiler.is_compiling() else os.environ.get("FOLD_TRAIN_KV_BOUNDS", "")
    if env in ("0", "1"):
        return env == "1"
    return spec.n_heads == spec.n_kv_heads and spec.head_dim in KV_BOUNDS_HEAD_DIMS


def _refuse_forward_ad(fn: str, *tensors) -> None:  # q, k, v[, sinks]
    """The ops have a backward only: under forward-mode AD (torch.func.jvp,
    torch.autograd.forward_ad) their outputs would carry zero tangents, silently wrong."""
    if torch.compiler.is_compiling():
        return
    for name, x in zip(("q", "k", "v", "sinks"), tensors):
        if x is not None and torch.autograd.forward_ad.unpack_dual(x).tangent is not None:
            raise NotImplementedError(
                f"{fn}: forward-mode AD (torch.func.jvp / torch.autograd.forward_ad) is not "
                f"supported: {name} carries a tangent, and the attention has a backward only"
            )


# ---- the eager path ------------------------------------------------------------------------
# An eager call (no torch.compile tracing, no functorch transform, no dispatch or function mode,
# plain tensors) runs the same _forward / _backward through a torch.autograd.Function instead of
# the custom ops' Python dispatch, which cost the eager call more host time than everything else
# in it (the op's default filling, redispatch and its own re-validation of a call the public
# function has validated already). The kernels, their arguments and so the bits are the ops';
# only the host's route to them differs (on the CPU reference: the same bits, 30% less host time
# per forward, 20% per forward + backward, session 42; on an H100 in session 44, 130-202 us of
# host time per forward against the ops' 244-266, 501-529 per forward + backward against 732-934,
# the gradient hashes equal). The default since session 44: FOLD_EAGER_AUTOGRAD=0 (read per call)
# takes the ops' route.


class _NoDoubleBackward(torch.autograd.Function):
    """grads = apply(n, *grads, *inputs): the first n tensors as they are, on a node that hangs
    from `inputs` (what the gradients depend on) and raises when differentiated, as the ops'
    bwd (no autograd formula) does: the gradients are not constants of q, k, v and the sinks,
    and a second-order gradient taken through them must not come back as None or zero."""

    @staticmethod
    def forward(ctx, n, *tensors):
        return tuple(g.detach() for g in tensors[:n])

    @staticmethod
    def backward(ctx, *_):
        raise RuntimeError("fold_attention: the attention's gradients cannot be differentiated "
                           "again (no double backward)")


class _EagerAttention(torch.autograd.Function):
    """out, lse = apply(q, k, v, sinks, spec, train): the ops' forward (fwd, or fwd_train when
    `train`) and _fwd_backward's backward, called directly. The same tensors are saved as by the
    ops' autograd (q, k, v as passed: the layout copy, where one is needed, is made again in the
    backward, as bwd does; and cu_seqlens, whose version check catches an in-place change
    between the forward and the backward)."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, spec, train):
        layout = _layout_for(spec.device)  # (fwd_train's too: `train` is CUDA only)
        out, lse, bounds = _forward(spec, *(layout(x, spec.varlen) for x in (q, k, v)),
                                    kv_bounds=train, sinks=sinks)
        ctx.save_for_backward(q, k, v, out, lse, bounds, sinks,
                              spec.cu_seqlens if spec.varlen else None)
        ctx.spec = spec
        ctx.mark_non_differentiable(lse)
        ctx.set_materialize_grads(False)  # (no zeros made for the LSE's absent gradient)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        with torch.no_grad():
            grads, inputs = _EagerAttention._grads(ctx, dout)
        if not torch.is_grad_enabled():
            return grads
        # create_graph=True: the gradients depend on q, k, v (and the sinks, and dout), but the
        # backward has no derivative of its own; differentiating them again raises.
        given = [g for g in grads if g is not None]
        refused = iter(_NoDoubleBackward.apply(len(given), *given,
                                               *[x for x in inputs if x is not None]))
        return tuple(None if g is None else next(refused) for g in grads)

    @staticmethod
    def _grads(ctx, dout):
        q, k, v, out, lse, bounds, sinks, _cu = ctx.saved_tensors
        spec = ctx.spec
        if dout is None:
            dout = torch.zeros_like(out)
        layout = _layout_for(spec.device)
        # (.contiguous(): a saved-tensor hook may hand back another layout; free otherwise.)
        lse = lse.contiguous()
        bounds = bounds.contiguous() if bounds is not None and spec.device.type == "cuda" else None
        dq, dk, dv = _backward(spec, *(layout(x, spec.varlen) for x in (q, k, v, out, dout)),
                               lse, bounds)
        need = ctx.needs_input_grad
        dsinks = _sinks_grad(sinks, out, dout, lse) if need[3] else None
        return ((dq if need[0] else None, dk if need[1] else None, dv if need[2] else None, dsinks,
                 None, None), (q, k, v, sinks, dout))


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def _eager(*tensors) -> bool:
    """Whether a call on these tensors (None skipped) may take _EagerAttention: not while
    torch.compile or torch.jit traces, under a functorch transform (vmap, grad, ...: active, or
    wrapping a tensor), a torch function or dispatch mode (fake tensors, make_fx, and also
    torch.device(...) and torch.set_default_device, which therefore keep the ops' route) or with
    tensor subclasses, where the custom ops' registrations (fake kernels, autograd) are what
    makes the call traceable or refused cleanly; and not with FOLD_EAGER_AUTOGRAD=0."""
    if torch.compiler.is_compiling() or os.environ.get("FOLD_EAGER_AUTOGRAD") == "0":
        return False
    if (torch._C._len_torch_function_stack() or torch._C._len_torch_dispatch_stack()
            or torch._C._are_functorch_transforms_active() or torch.jit.is_tracing()):
        return False
    for x in tensors:
        if x is not None and (type(x) not in _PLAIN_TENSORS
                              or torch._C._functorch.is_functorch_wrapped_tensor(x)):
            return False
    return True


def _run(spec: AttnSpec, q, k, v, return_lse: bool, fn: str, sinks=None):
    _require_backend(spec, fn)
    _refuse_forward_ad(fn, q, k, v, sinks)
    train = _train_forward(spec, q, k, v)
    if _eager(q, k, v, sinks):
        out, lse = _EagerAttention.apply(q, k, v, sinks, spec, train)
    else:
        op = _fwd_train_op if train else _fwd_op
        out, lse = op(q, k, v, spec.cu_seqlens if spec.varlen else None, spec.seqlen,
                      spec.causal, spec.softmax_scale, spec.window_before, spec.window_after,
                      sinks)[:2]
    if not return_lse:
        return out
    if not spec.varlen:
        # (H, B*S) -> (B, H, S), FlashAttention's dense LSE layout (a view).
        lse = lse.view(spec.n_heads, spec.batch, spec.seqlen).permute(1, 0, 2)
    return out, lse


def fold_attn_func(q, k, v, causal=False, softmax_scale=None, return_lse=False, window_size=(-1, -1),
                   sinks=None):
    """Self-attention over a dense batch.

    Args:
        q: (batch, seqlen, n_heads, head_dim), bfloat16, float16 or float32.
        k, v: (batch, seqlen, n_kv_heads, head_dim), same dtype and device as q;
            n_heads must be a multiple of n_kv_heads (GQA/MQA).
        causal: mask keys after the query (key j > query i).
        softmax_scale: defaults to 1 / sqrt(head_dim).
        return_lse: also return the natural-log LSE, float32 (batch, n_heads, seqlen),
            which is not differentiable.
        window_size: (left, right), FlashAttention's sliding window: query i sees keys
            i - left .. i + right of its own sequence (with causal, right is 0); -1 is
            unbounded on that side. A side at least as long as the sequence masks nothing.
        sinks: None, or a (n_heads,) floating tensor on q's device (gpt-oss's attention
            sinks): head h's sink logit (in the scaled-score space, natural log) takes softmax
            mass exp(sinks[h]) in every row's denominator and gives no value; the LSE includes
            it; differentiable (its gradient is a sum over every row of the batch, deterministic
            run to run). On CUDA the forward kernels fold the sink into each row after its last
            key block; the backward needs nothing more (it takes the forward's LSE).

    Returns:
        out (q's shape and dtype), or (out, lse) when return_lse is True. The backward
        gives bit-identical gradients across repeats, batch composition and packing.
    """
    fn = "fold_attn_func"
    spec = validate_attention(
        q, k, v, fn=fn, varlen=False, causal=causal, softmax_scale=softmax_scale,
        window_size=window_size,
    )
    return_lse = require_flag(return_lse, "return_lse", fn)
    return _run(spec, q, k, v, return_lse, fn, check_sinks(sinks, spec, fn))


def fold_attn_varlen_func(
    q, k, v, cu_seqlens, max_seqlen=None, causal=False, softmax_scale=None, return_lse=False,
    window_size=(-1, -1), sinks=None,
):
    """Self-attention over packed variable-length sequences.

    Args:
        q: (total_tokens, n_heads, head_dim); k, v: (total_tokens, n_kv_heads, head_dim).
        cu_seqlens: int32 (batch + 1,), on q's device: 0, then non-decreasing offsets
            ending at total_tokens. Empty sequences are allowed.
        max_seqlen: optional upper bound on the sequence lengths (checked, else computed).
            Under torch.compile or while a CUDA graph is captured the offsets cannot be
            read on the host: the packed length then bounds every sequence (always correct,
            also for other offsets at replay, but the kernels launch idle blocks for it), and
            the offsets' values are not validated (the kernels clamp them on the device).
        causal, softmax_scale, window_size, sinks: as in fold_attn_func (the window's
            positions are each sequence's own: it never reaches into a neighbour).
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
        window_size=window_size,
    )
    return_lse = require_flag(return_lse, "return_lse", fn)
    return _run(spec, q, k, v, return_lse, fn, check_sinks(sinks, spec, fn))
