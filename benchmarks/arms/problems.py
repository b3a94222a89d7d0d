"""The inputs a case hands to every arm (static tensors, so graphs can replay)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

import torch


@dataclass
class TrainProblem:
    """Dense (B, S, H, D) training inputs (FlashAttention layout), or varlen packed
    (T, H, D) with cu_seqlens when seqlens is given."""
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    dout: torch.Tensor
    causal: bool = True
    seqlens: Optional[List[int]] = None
    cu_seqlens: Optional[torch.Tensor] = None

    @property
    def varlen(self) -> bool:
        return self.seqlens is not None

    @property
    def heads(self) -> int:
        return self.q.shape[-2]

    @property
    def kv_heads(self) -> int:
        return self.k.shape[-2]

    @property
    def head_dim(self) -> int:
        return self.q.shape[-1]

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads


@dataclass
class DecodeProblem:
    """One decode step: q (B, H, D); a contiguous bf16 cache k, v (B, H_kv, L, D)."""
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    softmax_scale: Optional[float] = None
    extra: dict = field(default_factory=dict)

    @property
    def batch(self) -> int:
        return self.q.shape[0]

    @property
    def heads(self) -> int:
        return self.q.shape[1]

    @property
    def kv_heads(self) -> int:
        return self.k.shape[1]

    @property
    def context(self) -> int:
        return self.k.shape[2]

    @property
    def head_dim(self) -> int:
        return self.q.shape[2]

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads


def grad_fn(out: torch.Tensor, inputs, dout: torch.Tensor):
    """A backward callable on a fixed forward graph (retain_graph so it can repeat)."""
    def f():
        return torch.autograd.grad(out, inputs, dout, retain_graph=True)
    return f


def fresh_leaves(*ts: torch.Tensor):
    return tuple(t.detach().clone().requires_grad_(True) for t in ts)


class deterministic_mode:
    """torch.use_deterministic_algorithms(True) for the duration (restored after).

    Uninitialised-memory filling (on by default in that mode) is switched off: it
    adds a NaN-fill of every new buffer, a cost of the debugging aid, not of the
    deterministic kernels being measured."""

    def __enter__(self):
        self.prev = torch.are_deterministic_algorithms_enabled()
        self.prev_warn = torch.is_deterministic_algorithms_warn_only_enabled()
        torch.use_deterministic_algorithms(True)
        self.prev_fill = None
        try:
            import torch.utils.deterministic as tud
            self.prev_fill = tud.fill_uninitialized_memory
            tud.fill_uninitialized_memory = False
        except Exception:
            pass
        return self

    def __exit__(self, *exc):
        torch.use_deterministic_algorithms(self.prev, warn_only=self.prev_warn)
        if self.prev_fill is not None:
            import torch.utils.deterministic as tud
            tud.fill_uninitialized_memory = self.prev_fill
        return False


def wrap_deterministic(f):
    def g():
        with deterministic_mode():
            return f()
    return g
