"""The CUDA calls' device handling: early, clear errors for GPUs the CUDA kernels were not
built for, and the device scope and stream handle every C call of the package takes.

The library's kernels are compiled for sm_90a only (H100/H200: wgmma, TMA and setmaxnreg
exist there alone). On any other GPU a launch would fail with the CUDA runtime's "no kernel
image is available"; this check says what is needed instead, before any work is queued.
"""

from __future__ import annotations

import contextlib
import functools

import torch

from . import _lib

__all__ = ["device_scope", "require_cuda_kernels", "stream_capturing", "stream_handle"]

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


# torch's own raw-stream query (what its compiled code calls): the handle without building a
# torch.cuda.Stream object, 0.5 us per call against 8.3 for the public route on an H100 host
# (session 47, scripts/host_breakdown.py). Absent from some builds: then the public route.
_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def stream_handle(device: torch.device) -> int:
    """The cudaStream_t of torch's current stream on `device`, as an integer (the value of
    torch.cuda.current_stream(device).cuda_stream)."""
    if _RAW_STREAM is not None:
        return _RAW_STREAM(_index(device))
    return torch.cuda.current_stream(device).cuda_stream


def device_scope(device: torch.device):
    """A context in which the CUDA runtime's current device is `device`. The library works on
    the current device (its launches, its device queries): a call on tensors of another GPU than
    the current one (a model split over GPUs in one process) must switch to theirs first, or it
    would launch on the wrong device. Nothing to switch in the usual case, where entering and
    leaving torch.cuda.device costs 8.6 us of host time (session 47, H100 host; this 1.0)."""
    if device.index is None or device.index == torch.cuda.current_device():
        return contextlib.nullcontext()
    return torch.cuda.device(device)


def stream_capturing(device: torch.device) -> bool:
    """Whether torch's current stream on `device` is capturing a CUDA graph. torch's own query
    looks at the current device's stream, which is not the tensors' when they live on another
    GPU (a capture on cuda:1's stream with cuda:0 current would read as not capturing, and the
    host reads that follow would break the capture). Not traceable: callers test
    torch.compiler.is_compiling() first."""
    if device.type != "cuda":
        return False
    with device_scope(device):
        return torch.cuda.is_current_stream_capturing()
