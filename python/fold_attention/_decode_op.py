"""The decode step as a torch.library custom op: fold_attention::decode_step.

One op covers the CPU reference and the CUDA kernels. It takes the cache's buffers as
tensors (declared as mutated: the optional append writes planes, scales, page sums, heavy
keys and lengths; the CUDA kernels also write the workspace and the counters), so
torch.compile(fullgraph=True) traces a step without a graph break and CUDA graphs capture
it. The op does no host bookkeeping and reads no device memory on the host: page
reservation and the host-side checks are FoldKVCache's job, done in eager code before the
op runs (see fold_attn_with_kvcache).
"""

from __future__ import annotations

import ctypes
from typing import Optional

import torch

from . import _lib
from ._bind import DTYPE_CODES
from ._device import device_scope, stream_handle
from ._decode_lib import STATS_COUNTERS, FoldDecodeParams, FoldDecodeStats, FoldKVCacheDesc, library
from ._lib import FoldTensor

__all__ = ["cache_desc", "decode_precheck_cuda", "decode_step_impl", "decode_step_into", "decode_step_new",
           "decode_step_op"]

_MUTATED = (
    "k_a",
    "k_b",
    "k_scale",
    "v",
    "v_a",
    "v_b",
    "v_exp",
    "v_page_sum",
    "heavy_keys",
    "lengths",
    "workspace",
    "stats",
)


def _ptr(t: Optional[torch.Tensor]):
    return None if t is None else t.data_ptr()


def _rows(t: Optional[torch.Tensor], heads: int, dim: int) -> FoldTensor:
    """A contiguous (batch, heads, dim) tensor as the C ABI's batch-strided view."""
    if t is None:
        return FoldTensor(None, 0, 0, 0)
    return FoldTensor(t.data_ptr(), heads * dim, 0, dim)


def cache_desc(dtype, batch, D, k_a, k_b, k_scale, v, v_a, v_b, v_exp, v_page_sum, heavy_keys,
               page_table, lengths, max_len, v_exp_fixed, pinned_window=0) -> FoldKVCacheDesc:
    """The C descriptor of a cache's buffers (FoldKVCache's)."""
    num_pages, n_kv_heads, page_size, _ = k_a.shape
    return FoldKVCacheDesc(
        batch=batch,
        n_kv_heads=n_kv_heads,
        head_dim=D,
        page_size=page_size,
        max_len=max_len,
        pages_per_request=page_table.shape[1],
        num_pages=num_pages,
        dtype=DTYPE_CODES[dtype],
        v8=0 if v is not None else 1,
        v_exp_fixed=1 if v_exp_fixed else 0,
        k_a=k_a.data_ptr(),
        k_b=k_b.data_ptr(),
        k_scale=k_scale.data_ptr(),
        v=_ptr(v),
        v_a=_ptr(v_a),
        v_b=_ptr(v_b),
        v_exp=v_exp.data_ptr(),
        v_page_sum=v_page_sum.data_ptr(),
        heavy_keys=heavy_keys.data_ptr(),
        page_table=page_table.data_ptr(),
        lengths=lengths.data_ptr(),
        pinned_window=pinned_window,
    )

def decode_precheck_cuda(q, k_step, v_step, k_a, k_b, k_scale, v, v_a, v_b, v_exp, v_page_sum,
                         heavy_keys, page_table, lengths, workspace, stats, max_len, v_exp_fixed,
                         *_settings, desc: Optional[FoldKVCacheDesc] = None) -> tuple[list, int]:
    """The eager step's host checks of a CUDA cache in one device read
    (fold_decode_cuda_precheck): the requests' lengths as a list, and a bit mask of the inputs
    holding an inf or NaN (1: q, 2: k_step, 4: v_step, in the rows of active requests). Takes
    the op's arguments (q, k_step, v_step, then FoldKVCache._step_buffers()); `desc`, the
    cache's C descriptor if the caller keeps one (else built from the buffers)."""
    batch, n_heads, D = q.shape
    n_kv_heads = k_a.shape[1]
    if desc is None:
        desc = cache_desc(q.dtype, batch, D, k_a, k_b, k_scale, v, v_a, v_b, v_exp, v_page_sum,
                          heavy_keys, page_table, lengths, max_len, v_exp_fixed)
    out = (ctypes.c_int32 * batch)()
    bits = ctypes.c_int32(0)
    with device_scope(q.device):
        status = library().fold_decode_cuda_precheck(
            ctypes.byref(desc), n_heads, _rows(q, n_heads, D), _rows(k_step, n_kv_heads, D),
            _rows(v_step, n_kv_heads, D), out, ctypes.byref(bits),
            ctypes.c_void_p(stream_handle(q.device)),
        )
    _lib.check(status, "fold_decode_cuda_precheck")
    return list(out), bits.value


def decode_step_into(
    out: torch.Tensor,
    lse: torch.Tensor,
    q: torch.Tensor,
    k_step: Optional[torch.Tensor],
    v_step: Optional[torch.Tensor],
    k_a: torch.Tensor,
    k_b: torch.Tensor,
    k_scale: torch.Tensor,
    v: Optional[torch.Tensor],
    v_a: Optional[torch.Tensor],
    v_b: Optional[torch.Tensor],
    v_exp: torch.Tensor,
    v_page_sum: torch.Tensor,
    heavy_keys: torch.Tensor,
    page_table: torch.Tensor,
    lengths: torch.Tensor,
    workspace: torch.Tensor,
    stats: torch.Tensor,
    max_len: int,
    v_exp_fixed: bool,
    softmax_scale: float,
    depth: Optional[float],
    refine_band: float,
    v_refine_band: float,
    window_before: int = 0,
    sinks: Optional[torch.Tensor] = None,
    pinned_window: int = 0,
    desc: Optional[FoldKVCacheDesc] = None,
) -> None:
    """q (batch, n_heads, D) contiguous; k_step/v_step None or (batch, n_kv_heads, D)
    contiguous; the cache buffers as FoldKVCache holds them. Writes out (batch, n_heads, D),
    contiguous in q's dtype, and the natural-log LSE (batch, n_heads), contiguous float32; stats
    receives the FOLD_DECODE_CUDA_STATS counters. (decode_step_cuda writes the caller's buffers
    with it: no copy kernels in a captured step.) `desc`: the cache's C descriptor, if the caller
    keeps one (FoldKVCache builds it once: its buffers never move), else built from the buffers
    (~14 pointer queries and a ctypes structure: ~10 us of host time per call). window_before:
    the C ABI's (0: none; w: the query sees its request's last w keys); sinks: None or a
    contiguous float32 (n_heads,) tensor on q's device; pinned_window: the cache's
    (fold_kvcache_t's: 0, or the window every step takes)."""
    batch, n_heads, D = q.shape
    n_kv_heads = k_a.shape[1]
    if desc is None:
        desc = cache_desc(q.dtype, batch, D, k_a, k_b, k_scale, v, v_a, v_b, v_exp, v_page_sum,
                          heavy_keys, page_table, lengths, max_len, v_exp_fixed, pinned_window)
    params = FoldDecodeParams(
        n_heads=n_heads,
        softmax_scale=softmax_scale,
        dense=1 if depth is None else 0,
        depth=0.0 if depth is None else depth,
        refine_band=refine_band,
        v_refine_band=v_refine_band,
        window_before=window_before,
        sinks=_ptr(sinks),
    )
    qt, ot = _rows(q, n_heads, D), _rows(out, n_heads, D)
    kt, vt = _rows(k_step, n_kv_heads, D), _rows(v_step, n_kv_heads, D)
    lse_p = ctypes.cast(lse.data_ptr(), ctypes.POINTER(ctypes.c_float))
    if q.device.type == "cuda":
        with device_scope(q.device):
            status = library().fold_decode_cuda(
                ctypes.byref(desc), ctypes.byref(params), qt, kt, vt, ot, lse_p,
                ctypes.cast(stats.data_ptr(), ctypes.POINTER(ctypes.c_int64)),
                ctypes.c_void_p(workspace.data_ptr()), ctypes.c_size_t(workspace.numel()),
                ctypes.c_void_p(stream_handle(q.device)),
            )
        _lib.check(status, "fold_decode_cuda")
        return
    s = FoldDecodeStats()
    status = library().fold_decode_cpu(ctypes.byref(desc), ctypes.byref(params), qt, kt, vt, ot, lse_p,
                                       ctypes.byref(s))
    _lib.check(status, "fold_decode_cpu")
    counters = [s.keys, s.live_keys, s.refine_keys, s.v_refine_keys, s.rows, s.fixup_rows, int(s.bytes_read)]
    counters += [0] * (STATS_COUNTERS - len(counters))
    stats.copy_(torch.tensor(counters, dtype=torch.int64, device="cpu"))


def _check_step_tensors(q, k_step, v_step, k_a, k_b, k_scale, v, v_a, v_b, v_exp, v_page_sum,
                        heavy_keys, page_table, lengths, workspace, stats, window_before=0,
                        sinks=None, pinned_window=0) -> None:
    """fold_attention::decode_step's tensors against the cache's buffers: shapes, dtypes,
    devices and layouts (a q or k_step that does not match the cache would make the step read
    or write past the buffers). Raises ValueError / TypeError naming the argument."""
    fn = "fold_attention::decode_step"
    for name, t in (("q", q), ("k_a", k_a), ("k_b", k_b), ("k_scale", k_scale), ("v_exp", v_exp),
                    ("v_page_sum", v_page_sum), ("heavy_keys", heavy_keys), ("page_table", page_table),
                    ("lengths", lengths), ("workspace", workspace), ("stats", stats)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if k_a.dim() != 4 or page_table.dim() != 2 or lengths.dim() != 1:
        raise ValueError(f"{fn}: k_a, page_table and lengths must be the cache's buffers "
                         "(FoldKVCache._step_buffers())")
    batch, n_kv_heads, D = page_table.shape[0], k_a.shape[1], k_a.shape[3]
    if q.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"{fn}: q must be bfloat16 or float16, got {q.dtype}")
    if v is not None and v.dtype != q.dtype:
        raise TypeError(f"{fn}: q has dtype {q.dtype} but the cache holds {v.dtype}")
    if q.dim() != 3 or q.shape[0] != batch or q.shape[2] != D or q.shape[1] % n_kv_heads != 0:
        raise ValueError(f"{fn}: q must have shape (batch = {batch}, a multiple of {n_kv_heads} "
                         f"heads, head_dim = {D}), got {tuple(q.shape)}")
    if (k_step is None) != (v_step is None):
        raise ValueError(f"{fn}: pass both k_step and v_step, or neither")
    tensors = [("q", q)]
    for name, t in (("k_step", k_step), ("v_step", v_step)):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor or None, got {type(t).__name__}")
        if t.dtype != q.dtype:
            raise TypeError(f"{fn}: {name} has dtype {t.dtype} but q has {q.dtype}")
        if tuple(t.shape) != (batch, n_kv_heads, D):
            raise ValueError(f"{fn}: {name} must have shape {(batch, n_kv_heads, D)}, got {tuple(t.shape)}")
        tensors.append((name, t))
    for name, t in tensors:
        if not t.is_contiguous():
            raise ValueError(f"{fn}: {name} must be contiguous")
    if tuple(lengths.shape) != (batch,) or lengths.dtype != torch.int32:
        raise ValueError(f"{fn}: lengths must be int32 of shape ({batch},)")
    if stats.dtype != torch.int64 or stats.numel() < STATS_COUNTERS:
        raise ValueError(f"{fn}: stats must be int64 with >= {STATS_COUNTERS} elements")
    buffers = [("k_a", k_a), ("k_b", k_b), ("k_scale", k_scale), ("v", v), ("v_a", v_a), ("v_b", v_b),
               ("v_exp", v_exp), ("v_page_sum", v_page_sum), ("heavy_keys", heavy_keys),
               ("page_table", page_table), ("lengths", lengths), ("workspace", workspace), ("stats", stats)]
    for name, w in (("window_before", window_before), ("pinned_window", pinned_window)):
        if isinstance(w, bool) or not isinstance(w, int) or not 0 <= w < 2**31:
            raise ValueError(f"{fn}: {name} must be an int in [0, 2^31), got {w!r}")
    if sinks is not None:
        if not isinstance(sinks, torch.Tensor):
            raise TypeError(f"{fn}: sinks must be a torch.Tensor or None, got {type(sinks).__name__}")
        if sinks.dtype != torch.float32 or tuple(sinks.shape) != (q.shape[1],) or not sinks.is_contiguous():
            raise ValueError(f"{fn}: sinks must be a contiguous float32 tensor of shape ({q.shape[1]},), "
                             f"got {sinks.dtype} {tuple(sinks.shape)}")
        buffers.append(("sinks", sinks))
    for name, t in tensors + buffers:
        if t is not None and t.device != q.device:
            raise ValueError(f"{fn}: {name} is on {t.device} but q is on {q.device}")


def decode_step_impl(
    q: torch.Tensor,
    k_step: Optional[torch.Tensor],
    v_step: Optional[torch.Tensor],
    k_a: torch.Tensor,
    k_b: torch.Tensor,
    k_scale: torch.Tensor,
    v: Optional[torch.Tensor],
    v_a: Optional[torch.Tensor],
    v_b: Optional[torch.Tensor],
    v_exp: torch.Tensor,
    v_page_sum: torch.Tensor,
    heavy_keys: torch.Tensor,
    page_table: torch.Tensor,
    lengths: torch.Tensor,
    workspace: torch.Tensor,
    stats: torch.Tensor,
    max_len: int,
    v_exp_fixed: bool,
    softmax_scale: float,
    depth: Optional[float],
    refine_band: float,
    v_refine_band: float,
    window_before: int = 0,
    sinks: Optional[torch.Tensor] = None,
    pinned_window: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """decode_step_into, into new out / LSE tensors, returned: the op's implementation.
    torch.compile traces decode_step_op; eager steps call decode_step_new (the same work, with
    the cache's own descriptor) without the op's dispatch. The step's tensors are checked
    against the cache's buffers first (metadata only: nothing is read from the device), since
    the kernels and the C reference take their sizes from q's shape and the buffers'."""
    _check_step_tensors(q, k_step, v_step, k_a, k_b, k_scale, v, v_a, v_b, v_exp, v_page_sum,
                        heavy_keys, page_table, lengths, workspace, stats, window_before, sinks,
                        pinned_window)
    return decode_step_new(q, k_step, v_step, k_a, k_b, k_scale, v, v_a, v_b, v_exp, v_page_sum,
                           heavy_keys, page_table, lengths, workspace, stats, max_len, v_exp_fixed,
                           softmax_scale, depth, refine_band, v_refine_band, window_before, sinks,
                           pinned_window)


def decode_step_new(q, *args, desc: Optional[FoldKVCacheDesc] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """decode_step_into into new out / LSE tensors: q, then decode_step_into's arguments after
    q (k_step, v_step, the cache's buffers and settings). Called directly by eager steps
    (FoldKVCache._step): the custom-op dispatch (autograd, version counters of the twelve
    mutated buffers) costs ~40 us of host time per step on the H200 host, and nothing in eager
    mode needs it."""
    batch, n_heads, D = q.shape
    out = torch.empty((batch, n_heads, D), dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, n_heads), dtype=torch.float32, device=q.device)
    decode_step_into(out, lse, q, *args, desc=desc)
    return out, lse


decode_step_op = torch.library.custom_op("fold_attention::decode_step", mutates_args=_MUTATED)(
    decode_step_impl
)


@decode_step_op.register_fake
def _decode_step_fake(q, k_step, v_step, k_a, k_b, k_scale, v, v_a, v_b, v_exp, v_page_sum, heavy_keys,
                      page_table, lengths, workspace, stats, max_len, v_exp_fixed, softmax_scale, depth,
                      refine_band, v_refine_band, window_before=0, sinks=None, pinned_window=0):
    batch, n_heads, D = q.shape
    return q.new_empty((batch, n_heads, D)), q.new_empty((batch, n_heads), dtype=torch.float32)
