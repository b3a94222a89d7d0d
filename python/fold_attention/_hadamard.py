"""The cache writers' unnormalised Hadamard rotation (src/decode/planes.h hadamard_unnormalised)
in torch: Sylvester butterflies (x, z) -> (x + z, x - z) over the last dimension, in float32 as
the writers compute them, so each element's bits are theirs."""

from __future__ import annotations

import torch


def hadamard_unnormalised(y: torch.Tensor) -> torch.Tensor:
    """y (..., D), float32, D a power of two: H y, H the Hadamard matrix without 1 / sqrt(D)
    (H H = D I, so H (H y) / D = y)."""
    shape, D = y.shape, y.shape[-1]
    h = 1
    while h < D:
        y = y.reshape(-1, D // (2 * h), 2, h)
        y = torch.cat([y[:, :, 0] + y[:, :, 1], y[:, :, 0] - y[:, :, 1]], dim=2)
        h *= 2
    return y.reshape(shape)
