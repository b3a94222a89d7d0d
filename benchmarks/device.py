"""The device the suites run on: CUDA, or the CPU for a dry run of the whole
pipeline (FOLD_BENCH_DEVICE=cpu; tiny shapes, SDPA's math backend, wall-clock
timing, no graphs). A dry run checks the plumbing, never speed."""
from __future__ import annotations

import os

import torch

DEVICE = os.environ.get("FOLD_BENCH_DEVICE", "cuda")
DRY = DEVICE == "cpu"


def sync() -> None:
    if DEVICE == "cuda" and torch.cuda.is_available():
        torch.cuda.synchronize()


def empty_cache() -> None:
    if DEVICE == "cuda" and torch.cuda.is_available():
        torch.cuda.empty_cache()


def generator(seed: int) -> torch.Generator:
    return torch.Generator(device=DEVICE).manual_seed(seed)
