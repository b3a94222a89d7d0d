"""Early, clear errors for GPUs the CUDA kernels were not built for.

The library's kernels are compiled for sm_90a only (H100/H200: wgmma, TMA and setmaxnreg
exist there alone). On any other GPU a launch would fail with the CUDA runtime's "no kernel
image is available"; this check says what is needed instead, before any work is queued.
"""

from __future__ import annotations

import functools

import torch

from . import _lib

__all__ = ["require_cuda_kernels"]

SUPPORTED_CAPABILITY = (9, 0)


@functools.lru_cache(maxsize=None)
def _capability(index: int) -> tuple[tuple[int, int], str]:
    return torch.cuda.get_device_capability(index), torch.cuda.get_device_name(index)


def require_cuda_kernels(device: torch.device, fn: str) -> None:
    """Raise unless `device` can run this library's CUDA kernels."""
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and compiler.is_compiling():
        # While tracing, the ctypes and device queries cannot be traced (a graph break); the
        # check has its effect in eager calls, and a traced call on an unsupported GPU still
        # fails at run time with the CUDA runtime's error.
        return
    if not _lib.built_with_cuda():
        raise NotImplementedError(
            f"{fn}: this build of FoldAttention has no CUDA kernels (it was built without "
            "nvcc); reinstall on a machine with the CUDA toolkit, or use CPU tensors"
        )
    index = device.index if device.index is not None else torch.cuda.current_device()
    capability, name = _capability(index)
    if capability != SUPPORTED_CAPABILITY:
        major, minor = capability
        raise RuntimeError(
            f"{fn}: FoldAttention's CUDA kernels need an NVIDIA SM90 GPU (H100 or H200, "
            f"compute capability 9.0); {device} is {name} (compute capability {major}.{minor}). "
            "Use CPU tensors (the reference backend) on this machine."
        )
