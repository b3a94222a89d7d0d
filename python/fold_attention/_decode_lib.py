"""ctypes mirror of include/fold_attention/decode.h, declared on the shared library.

The decode entry points live in their own header; their structures and signatures are
declared here, on the CDLL that _lib.library() loads, the first time they are needed.
"""

from __future__ import annotations

import ctypes
import threading

from . import _lib
from ._lib import FoldTensor

__all__ = [
    "SPLIT_KEYS",
    "V_EXP_UNSET",
    "V_REFINE_EXTRA",
    "STATS_COUNTERS",
    "FoldKVCacheDesc",
    "FoldDecodeParams",
    "FoldDecodeStats",
    "library",
]

# Mirrors of the header's macros.
SPLIT_KEYS = 512
HEAVY_KEYS = 8
V_EXP_UNSET = -1000
V_REFINE_EXTRA = 2.0  # plane B of V is read within refine_band + 2 binades of Z
STATS_COUNTERS = 8  # FOLD_DECODE_CUDA_STATS


class FoldKVCacheDesc(ctypes.Structure):
    """fold_kvcache_t."""

    _fields_ = [
        ("batch", ctypes.c_int32),
        ("n_kv_heads", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("page_size", ctypes.c_int32),
        ("max_len", ctypes.c_int32),
        ("pages_per_request", ctypes.c_int32),
        ("num_pages", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("v8", ctypes.c_int32),
        ("v_exp_fixed", ctypes.c_int32),
        ("k_a", ctypes.c_void_p),
        ("k_b", ctypes.c_void_p),
        ("k_scale", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("v_a", ctypes.c_void_p),
        ("v_b", ctypes.c_void_p),
        ("v_exp", ctypes.c_void_p),
        ("v_page_sum", ctypes.c_void_p),
        ("heavy_keys", ctypes.c_void_p),
        ("page_table", ctypes.c_void_p),
        ("lengths", ctypes.c_void_p),
        ("pinned_window", ctypes.c_int32),
    ]


class FoldDecodeParams(ctypes.Structure):
    """fold_decode_params_t."""

    _fields_ = [
        ("n_heads", ctypes.c_int32),
        ("softmax_scale", ctypes.c_float),
        ("dense", ctypes.c_int32),
        ("depth", ctypes.c_float),
        ("refine_band", ctypes.c_float),
        ("v_refine_band", ctypes.c_float),
        ("window_before", ctypes.c_int32),
        ("sinks", ctypes.c_void_p),
    ]


class FoldDecodeStats(ctypes.Structure):
    """fold_decode_stats_t."""

    _fields_ = [
        ("keys", ctypes.c_int64),
        ("live_keys", ctypes.c_int64),
        ("refine_keys", ctypes.c_int64),
        ("v_refine_keys", ctypes.c_int64),
        ("rows", ctypes.c_int64),
        ("fixup_rows", ctypes.c_int64),
        ("bytes_read", ctypes.c_double),
    ]


_P_CACHE = ctypes.POINTER(FoldKVCacheDesc)
_SIGNATURES = {
    "fold_kvcache_append_cpu": (
        ctypes.c_int,
        [_P_CACHE, ctypes.c_int32, ctypes.c_int32, FoldTensor, FoldTensor],
    ),
    "fold_decode_cpu": (
        ctypes.c_int,
        [
            _P_CACHE,
            ctypes.POINTER(FoldDecodeParams),
            FoldTensor,  # q
            FoldTensor,  # k_step (data NULL: no append)
            FoldTensor,  # v_step
            FoldTensor,  # out
            ctypes.POINTER(ctypes.c_float),  # lse or NULL
            ctypes.POINTER(FoldDecodeStats),
        ],
    ),
    "fold_decode_cuda_workspace_size": (ctypes.c_size_t, [_P_CACHE, ctypes.c_int32]),
    "fold_kvcache_append_cuda": (
        ctypes.c_int,
        [_P_CACHE, ctypes.c_int32, ctypes.c_int32, FoldTensor, FoldTensor, ctypes.c_void_p],
    ),
    "fold_decode_cuda_precheck": (
        ctypes.c_int,
        [
            _P_CACHE,
            ctypes.c_int32,  # n_heads
            FoldTensor,  # q
            FoldTensor,  # k_step (data NULL: no append)
            FoldTensor,  # v_step
            ctypes.POINTER(ctypes.c_int32),  # lengths_out [batch], host
            ctypes.POINTER(ctypes.c_int32),  # nonfinite, host
            ctypes.c_void_p,  # stream
        ],
    ),
    "fold_decode_cuda": (
        ctypes.c_int,
        [
            _P_CACHE,
            ctypes.POINTER(FoldDecodeParams),
            FoldTensor,
            FoldTensor,
            FoldTensor,
            FoldTensor,
            ctypes.POINTER(ctypes.c_float),
            ctypes.POINTER(ctypes.c_int64),  # device counters or NULL
            ctypes.c_void_p,  # workspace
            ctypes.c_size_t,
            ctypes.c_void_p,  # stream
        ],
    ),
}

_lock = threading.Lock()
_declared: ctypes.CDLL | None = None


def library() -> ctypes.CDLL:
    """The shared library with the decode entry points declared."""
    global _declared
    lib = _lib.library()
    if _declared is lib:
        return lib
    with _lock:
        if _declared is not lib:
            for name, (restype, argtypes) in _SIGNATURES.items():
                try:
                    fn = getattr(lib, name)
                except AttributeError as exc:
                    raise OSError(f"fold_attention: the library has no entry point {name}") from exc
                fn.restype = restype
                fn.argtypes = argtypes
            _declared = lib
    return lib
