"""Loading of the FoldAttention shared library through ctypes.

The library exposes a plain C ABI (include/fold_attention/fold_attention.h) and has no
dependency on Python or torch, so one build serves every interpreter. This module
mirrors the header's types, declares the signature of every entry point, and turns a
non-OK status into a Python exception carrying fold_last_error()'s message.

The library is found, in this order, at:
  1. the file named by the environment variable FOLD_ATTENTION_LIBRARY;
  2. libfold_attention.so (or its soname, libfold_attention.so.0) inside this package
     (installed wheels);
  3. <repo>/build/libfold_attention.so (a development build of this checkout).
It is loaded on first use, so importing the package needs neither the library nor a GPU.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

__all__ = [
    "ENV_VAR",
    "LIBRARY_NAME",
    "FOLD_MAX_HEAD_DIM",
    "FOLD_BWD_BOUNDS",
    "Status",
    "DType",
    "FoldTensor",
    "FoldAttnProblem",
    "FoldAttentionError",
    "library",
    "library_path",
    "check",
]

ENV_VAR = "FOLD_ATTENTION_LIBRARY"
LIBRARY_NAME = "libfold_attention.so"
_ABI_MAJOR = 0  # FOLD_ATTENTION_VERSION_MAJOR: the soname's number

# Mirrors of the header's macros.
FOLD_MAX_HEAD_DIM = 256
FOLD_BWD_BOUNDS = 4


class Status:
    """fold_status_t."""

    OK = 0
    ERR_INVALID_ARGUMENT = 1
    ERR_UNSUPPORTED = 2
    ERR_NO_CUDA = 3
    ERR_CUDA = 4
    ERR_INTERNAL = 5

    NAMES = {
        0: "FOLD_OK",
        1: "FOLD_ERR_INVALID_ARGUMENT",
        2: "FOLD_ERR_UNSUPPORTED",
        3: "FOLD_ERR_NO_CUDA",
        4: "FOLD_ERR_CUDA",
        5: "FOLD_ERR_INTERNAL",
    }


class DType:
    """fold_dtype_t."""

    F32 = 0
    F16 = 1
    BF16 = 2


class FoldTensor(ctypes.Structure):
    """fold_tensor_t: a [*, heads, head_dim] view; strides in elements."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("batch_stride", ctypes.c_int64),
        ("token_stride", ctypes.c_int64),
        ("head_stride", ctypes.c_int64),
    ]


class FoldAttnProblem(ctypes.Structure):
    """fold_attn_problem_t: the shape and options of one self-attention call."""

    _fields_ = [
        ("batch", ctypes.c_int32),
        ("seqlen", ctypes.c_int32),
        ("cu_seqlens", ctypes.POINTER(ctypes.c_int32)),
        ("total_tokens", ctypes.c_int64),
        ("n_heads", ctypes.c_int32),
        ("n_kv_heads", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("causal", ctypes.c_int32),
        ("softmax_scale", ctypes.c_float),
        ("window_before", ctypes.c_int32),  # 0: unbounded (FlashAttention's window_size[0] + 1)
        ("window_after", ctypes.c_int32),  # 0: unbounded (window_size[1] + 1)
        ("sinks", ctypes.c_void_p),  # NULL, or n_heads float32 sink logits (the forward's)
    ]


class FoldAttentionError(RuntimeError):
    """A failure reported by the library that maps to no more specific Python type."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


_P_PROBLEM = ctypes.POINTER(FoldAttnProblem)
_P_FLOAT = ctypes.POINTER(ctypes.c_float)

# name -> (restype, argtypes); one row per entry point of the header.
_SIGNATURES = {
    "fold_version": (ctypes.c_char_p, []),
    "fold_last_error": (ctypes.c_char_p, []),
    "fold_built_with_cuda": (ctypes.c_int, []),
    "fold_check_problem": (ctypes.c_int, [_P_PROBLEM, ctypes.c_int]),
    "fold_fwd_cpu": (
        ctypes.c_int,
        [_P_PROBLEM, FoldTensor, FoldTensor, FoldTensor, FoldTensor, _P_FLOAT],
    ),
    "fold_bwd_preprocess_cpu": (
        ctypes.c_int,
        [_P_PROBLEM, FoldTensor, FoldTensor, FoldTensor, FoldTensor, _P_FLOAT, _P_FLOAT],
    ),
    "fold_bwd_cpu": (
        ctypes.c_int,
        [
            _P_PROBLEM,
            FoldTensor,  # q
            FoldTensor,  # k
            FoldTensor,  # v
            FoldTensor,  # out
            FoldTensor,  # dout
            _P_FLOAT,  # lse
            FoldTensor,  # dq
            FoldTensor,  # dk
            FoldTensor,  # dv
        ],
    ),
    "fold_bwd_preprocess_cuda": (
        ctypes.c_int,
        [
            _P_PROBLEM,
            FoldTensor,
            FoldTensor,
            FoldTensor,
            FoldTensor,
            _P_FLOAT,
            _P_FLOAT,
            ctypes.c_void_p,  # cudaStream_t
        ],
    ),
    "fold_fwd_cuda": (
        ctypes.c_int,
        [
            _P_PROBLEM,
            FoldTensor,  # q
            FoldTensor,  # k
            FoldTensor,  # v
            FoldTensor,  # out
            _P_FLOAT,  # lse
            ctypes.c_void_p,  # cudaStream_t
        ],
    ),
    "fold_fwd_cuda_kv_bounds": (
        ctypes.c_int,
        [
            _P_PROBLEM,
            FoldTensor,  # q
            FoldTensor,  # k
            FoldTensor,  # v
            FoldTensor,  # out
            _P_FLOAT,  # lse
            _P_FLOAT,  # kv_bounds
            ctypes.c_void_p,  # cudaStream_t
        ],
    ),
    "fold_bwd_cuda_workspace_size": (ctypes.c_size_t, [_P_PROBLEM]),
    "fold_bwd_cuda": (
        ctypes.c_int,
        [
            _P_PROBLEM,
            FoldTensor,  # q
            FoldTensor,  # k
            FoldTensor,  # v
            FoldTensor,  # out
            FoldTensor,  # dout
            _P_FLOAT,  # lse
            FoldTensor,  # dq
            FoldTensor,  # dk
            FoldTensor,  # dv
            ctypes.c_void_p,  # workspace
            ctypes.c_size_t,  # workspace_bytes
            ctypes.c_void_p,  # cudaStream_t
        ],
    ),
    "fold_bwd_cuda_kv_bounds": (
        ctypes.c_int,
        [
            _P_PROBLEM,
            FoldTensor,  # q
            FoldTensor,  # k
            FoldTensor,  # v
            FoldTensor,  # out
            FoldTensor,  # dout
            _P_FLOAT,  # lse
            FoldTensor,  # dq
            FoldTensor,  # dk
            FoldTensor,  # dv
            _P_FLOAT,  # kv_bounds (NULL: none)
            ctypes.c_void_p,  # workspace
            ctypes.c_size_t,  # workspace_bytes
            ctypes.c_void_p,  # cudaStream_t
        ],
    ),
}

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_lib_path: Path | None = None


def _repo_build_candidate() -> Path | None:
    """<repo>/build/libfold_attention.so, only when this file sits in a source checkout."""
    repo = Path(__file__).resolve().parent.parent.parent
    if not (repo / "include" / "fold_attention" / "fold_attention.h").is_file():
        return None
    return repo / "build" / LIBRARY_NAME


def _find_library() -> Path:
    env = os.environ.get(ENV_VAR)
    if env:
        path = Path(env)
        if not path.is_file():
            raise OSError(f"{ENV_VAR}={env!r} does not name an existing file")
        return path
    tried = []
    package_dir = Path(__file__).resolve().parent
    # The plain name first; then the soname (libfold_attention.so.<major>), which is what
    # an install of a versioned CMake target leaves when the unversioned link is skipped.
    for candidate in (package_dir / LIBRARY_NAME, package_dir / f"{LIBRARY_NAME}.{_ABI_MAJOR}"):
        tried.append(candidate)
        if candidate.is_file():
            return candidate
    dev_build = _repo_build_candidate()
    if dev_build is not None:
        tried.append(dev_build)
        if dev_build.is_file():
            return dev_build
    raise OSError(
        f"fold_attention: cannot find {LIBRARY_NAME}; looked at "
        + ", ".join(str(p) for p in tried)
        + f". Set {ENV_VAR} to the library file, install the package with pip, or build "
        "the CMake project into <repo>/build."
    )


def _declare(lib: ctypes.CDLL) -> None:
    for name, (restype, argtypes) in _SIGNATURES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError as exc:
            raise OSError(f"fold_attention: the library has no entry point {name}") from exc
        fn.restype = restype
        fn.argtypes = argtypes


def library() -> ctypes.CDLL:
    """The loaded library (loaded and declared on first call)."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            path = _find_library()
            lib = ctypes.CDLL(str(path))
            _declare(lib)
            _lib_path = path
            _lib = lib
    return _lib


def library_path() -> Path:
    """Where the loaded library came from."""
    library()
    assert _lib_path is not None
    return _lib_path


def last_error() -> str:
    msg = library().fold_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def check(status: int, what: str) -> None:
    """Raise the Python exception matching a non-OK fold_status_t of entry point `what`.

    Must be called on the thread that made the call (the message is thread-local).
    """
    if status == Status.OK:
        return
    detail = last_error() or "(no message)"
    name = Status.NAMES.get(status, f"status {status}")
    # The library's messages usually start with the entry point's name already.
    prefix = "" if detail.startswith(what) else f"{what}: "
    message = f"{prefix}{detail} [{name}]"
    if status == Status.ERR_INVALID_ARGUMENT:
        raise ValueError(message)
    if status == Status.ERR_UNSUPPORTED:
        raise NotImplementedError(message)
    if status == Status.ERR_NO_CUDA:
        raise RuntimeError(message + " (this build of the library has no CUDA support)")
    raise FoldAttentionError(message, status)


def version() -> str:
    return library().fold_version().decode("utf-8", "replace")


def built_with_cuda() -> bool:
    return bool(library().fold_built_with_cuda())
