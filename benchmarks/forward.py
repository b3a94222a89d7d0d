"""Forward suite: training forward, the backward suite's shapes and options (--shapes, --masks).

Per case and arm: TFLOP/s (4*B*H*S^2*D/2), error against one FP32 reference and
the bf16 floor. Arms: SDPA cuDNN / FLASH / EFFICIENT (tuned over GQA handling),
FlexAttention, FA3, FA4 where importable, and ours.

  python -m benchmarks.forward [--quick] [--out DIR] [--budget-s S] [--flex all|first|none]
      [--shapes quick|full|issue] [--masks causal|full|both]
"""
from .train_case import train_suite


def main(argv=None):
    train_suite("forward", "fwd", argv, __doc__)


if __name__ == "__main__":
    main()
