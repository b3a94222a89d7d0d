"""Backward suite: training backward, MHA and GQA, D 64/128, a varlen mix; causal by default
(--masks full|both for non-causal; --shapes issue for the training issue's shapes).

Per case and arm: TFLOP/s (backward = 2.5 x causal forward FLOPs), the error of
dQ, dK, dV against one FP32 reference (and the bf16 floor), whether two repeats
are bit-identical. Arms: SDPA cuDNN / FLASH / EFFICIENT, each also in
deterministic mode (torch.use_deterministic_algorithms, FA2's deterministic
flag), FlexAttention, FA3 (and its deterministic flag) and FA4 where importable,
and ours. An arm counts as deterministic when it runs a declared deterministic
mode and its repeat was bit-identical. The summary names the fastest
deterministic and the fastest nondeterministic arm and our ratio to each.

  python -m benchmarks.backward [--quick] [--out DIR] [--budget-s S] [--flex all|first|none]
      [--shapes quick|full|issue] [--masks causal|full|both]
"""
from .train_case import train_suite


def main(argv=None):
    train_suite("backward", "bwd", argv, __doc__)


if __name__ == "__main__":
    main()
