"""Unsupported hardware gets a clear, early error that says what is needed."""

import pytest
import torch

from fold_attention import _device


class _FakeDevice:
    type = "cuda"
    index = 0

    def __str__(self):
        return "cuda:0"


def test_non_sm90_gpu_is_refused_with_what_is_needed(monkeypatch):
    monkeypatch.setattr(_device._lib, "built_with_cuda", lambda: True)
    monkeypatch.setattr(_device, "_capability", lambda index: ((8, 0), "NVIDIA A100-SXM4-80GB"))
    with pytest.raises(RuntimeError, match=r"need an NVIDIA SM90 GPU .*A100.*8\.0"):
        _device.require_cuda_kernels(_FakeDevice(), "fold_attn_func")


def test_sm90_gpu_is_accepted(monkeypatch):
    monkeypatch.setattr(_device._lib, "built_with_cuda", lambda: True)
    monkeypatch.setattr(_device, "_capability", lambda index: ((9, 0), "NVIDIA H200"))
    _device.require_cuda_kernels(_FakeDevice(), "fold_attn_func")


def test_build_without_cuda_says_so(monkeypatch):
    monkeypatch.setattr(_device._lib, "built_with_cuda", lambda: False)
    with pytest.raises(NotImplementedError, match="built without\\s+nvcc|without nvcc"):
        _device.require_cuda_kernels(_FakeDevice(), "fold_attn_func")
