"""FoldAttention: attention with a declared softmax reference.

Training: fold_attn_func (dense) and fold_attn_varlen_func (packed), whose backward
gives bit-identical gradients across repeats, batching and packing. Decode:
FoldKVCache and fold_attn_with_kvcache. The compute lives in a C ABI shared library
loaded through ctypes on first use; importing this package needs neither it nor a GPU.
"""

from __future__ import annotations

from . import ops
from ._lib import FoldAttentionError
from .decode import FoldKVCache, PagePoolExhausted, fold_attn_with_kvcache
from .training import fold_attn_func, fold_attn_varlen_func

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "built_with_cuda",
    "library_version",
    "fold_attn_func",
    "fold_attn_varlen_func",
    "FoldKVCache",
    "fold_attn_with_kvcache",
    "PagePoolExhausted",
    "FoldAttentionError",
    "ops",
]


def built_with_cuda() -> bool:
    """True if the loaded library has its CUDA entry points compiled in."""
    from . import _lib

    return _lib.built_with_cuda()


def library_version() -> str:
    """The loaded library's fold_version() string."""
    from . import _lib

    return _lib.version()
