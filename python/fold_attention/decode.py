"""Decode: FoldKVCache and fold_attn_with_kvcache.

A FoldKVCache owns one layer's paged cache: K Hadamard-rotated as two int8 planes with
one scale per key, V as bf16/fp16 or (v8) two E4M3 planes under a per-request power-of-two
scale. fold_attn_with_kvcache optionally appends one token per request, then attends over
the cache with a declared per-row reference Z: keys whose coarse (plane-A) weight is more
than `depth` binades below Z are cut, their mass kept in the denominator and mass x the mean V of
their page in the numerator. The rules are specified in notes/decode.md. CPU tensors run the C++
reference of that algorithm; CUDA tensors (a cache built with device='cuda') run the
CUDA kernels, which give the same planes, Z, verdicts and outputs bit for bit.

Request slots: the cache has `batch` slots. A slot is free until prefill (slots
0..batch-1) or add_request claims it, and free again after release(); a step appends to
and attends over the active slots only (free slots give zero output and -inf LSE).

Pages: the slots share one pool of `num_pages` pages (default: enough for every slot at
max_len). A request takes pages as its tokens need them and returns them on release; an
operation that would need more pages than are free raises PagePoolExhausted before it
changes anything.
"""

from __future__ import annotations

import ctypes
import math
import numbers
import os

import torch

from . import _lib
from ._device import device_scope, stream_capturing, stream_handle
from ._decode_op import decode_precheck_cuda, decode_step_into, decode_step_new, decode_step_op
from ._bind import DTYPE_CODES
from . import _history
from ._hadamard import hadamard_unnormalised
from ._history import history_attention, history_tail, merge
from ._truncate import heavy_list, page_sum
from ._decode_lib import (
    HEAVY_KEYS,
    STATS_COUNTERS,
    V_EXP_UNSET,
    V_REFINE_EXTRA,
    FoldKVCacheDesc,
    library,
)
from ._lib import FoldTensor
from ._validate import (check_softmax_scale, check_window_size, require_flag, require_int, require_tensor,
                        round_float32)

__all__ = ["FoldKVCache", "PagePoolExhausted", "fold_attn_with_kvcache", "decode_step_cuda"]

_CACHE_DTYPES = (torch.bfloat16, torch.float16)
_HEAD_DIMS = (64, 128, 256)
_MAX_GROUP = 64
_E4M3_MAX = 448.0
DEFAULT_REFINE_BAND = 8.0


def _cuda_missing() -> str | None:
    """Why CUDA decode cannot run here (None: it can)."""
    if not torch.cuda.is_available():
        return "CUDA is not available to torch; use CPU tensors (device='cpu')"
    if not _lib.built_with_cuda():
        return "the library was built without CUDA; use CPU tensors (device='cpu')"
    return None


def _mismatch(fn: str, what: str, device: torch.device, cache_device: torch.device) -> str:
    """The device mismatch's message, with what to do about it (a cache built without a device
    takes torch's default device, the CPU unless set: CUDA tensors given to it land here)."""
    if cache_device.type == "cpu" and device.type == "cuda":
        hint = f"build the cache for them with FoldKVCache(..., device='{device}')"
    else:
        hint = f"pass tensors on {cache_device}"
    return f"{fn}: {what} is on {device} but the cache is on {cache_device}: {hint}"


def _require_cpu(device: torch.device, what: str, fn: str, cache_device: torch.device | None = None) -> None:
    """Accepts CPU tensors, and CUDA tensors on the cache's CUDA device."""
    if cache_device is None:
        cache_device = torch.device("cpu")
    if device.type == "cpu" and cache_device.type == "cpu":
        return
    if torch.compiler.is_compiling():
        # The ctypes query below cannot be traced; an eager call (the cache's construction
        # included) has already made it. The device match is all that is left to check.
        if device != cache_device:
            raise NotImplementedError(_mismatch(fn, what, device, cache_device))
        return
    if device.type == "cuda":
        why = _cuda_missing()
        if why is not None:
            raise NotImplementedError(f"{fn}: {what} is on {device}: {why}")
        if cache_device.type == "cuda" and device == cache_device:
            return
    if device.type not in ("cpu", "cuda"):
        raise NotImplementedError(f"{fn}: {what} is on {device}: no decode kernels for it; use CPU or CUDA tensors")
    raise NotImplementedError(_mismatch(fn, what, device, cache_device))


def _float32(x, name: str, fn: str, *, positive: bool) -> float:
    """x as the float32 value the library will read (the C parameters are float32), checked
    there: finite and > 0 (positive) or >= 0, so that a value that only becomes inf or 0 in
    float32 is refused here, naming the argument, not at the first step."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"{fn}: {name} must be a number or None, got {type(x).__name__}")
    bound = "> 0" if positive else ">= 0"
    try:
        value = round_float32(float(x))
    except OverflowError:  # (an int beyond a double's range)
        value = math.inf
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(f"{fn}: {name} must be finite and {bound} in float32, got {x!r}")
    return value


def _band(x, name: str, fn: str, default: float) -> float:
    if x is None:
        return default
    return _float32(x, name, fn, positive=False)


def _ptr(t: torch.Tensor | None):
    return None if t is None else t.data_ptr()


def _rotation_finite(y: torch.Tensor) -> bool:
    """Whether the rows of y (float32, (rows, D)) stay finite through the writers' unnormalised
    Hadamard butterflies (planes.h hadamard_unnormalised), in float32 as they compute them."""
    D = y.shape[1]
    if bool((y.abs() < 2.0 ** (128 - D.bit_length())).all()):  # D values below FLT_MAX / D
        return True
    return bool(torch.isfinite(hadamard_unnormalised(y)).all())


_LOG2E = 1.44269504088896340736  # (decode_step.cpp's kLog2e, as a float32 below)


def _query_scale(softmax_scale: float) -> float:
    """softmax_scale x log2 e as the decode step takes it: the float32 product of the two as
    float32 (exact as a Python float; a float32 tensor times it multiplies in float32)."""
    cpu = torch.device("cpu")  # (host scalars, whatever torch's default device)
    return float(torch.tensor(softmax_scale, dtype=torch.float32, device=cpu)
                 * torch.tensor(_LOG2E, dtype=torch.float32, device=cpu))


def _query_rotation_finite(rows: torch.Tensor, softmax_scale: float) -> bool:
    """Whether query rows (..., D) stay finite once scaled by softmax_scale x log2 e (both as
    float32) and rotated, as the decode step quantises them (the C reference refuses them
    otherwise)."""
    return _rotation_finite(rows.reshape(-1, rows.shape[-1]).float() * _query_scale(softmax_scale))


class PagePoolExhausted(RuntimeError):
    """A FoldKVCache operation needed more pages than its pool has free. Raised before the
    cache changes: release a request (or build the cache with a larger num_pages) and retry."""


class FoldKVCache:
    """One layer's paged KV cache for FoldAttention decode.

    Args:
        batch: request slots, >= 1.
        n_heads: query heads; a multiple of n_kv_heads, group size n_heads/n_kv_heads <= 64.
        n_kv_heads: key/value heads, >= 1.
        head_dim: 64, 128 or 256.
        max_len: tokens per request, >= 1.
        depth: binades below the reference a key's coarse weight may fall and stay live
            (finite, > 0); None: dense (every key read with both planes). Where the screen
            costs more time than the bytes it saves (bf16 / fp16 values with a group size
            above 8 at head_dim 128, or above 4 at head_dim 64; v8 values at head_dim 64 and
            128 whatever the group, whose screen is not yet on the tensor cores: measured on
            the H200), a step
            reads every key instead, with the bits of depth None (exact, so no error is
            added; the stats show every key live), on the CPU reference and the GPU alike.
            FOLD_DECODE_SCREEN=1 in the environment keeps the screen at every shape.
        v8: store V as two E4M3 planes with a power-of-two scale per (request, KV head).
            The scale follows the largest |v| of the (request, KV head) (E4M3's maximum is
            448), and E4M3's range below it is short: values more than ~2^14 below that
            maximum reach E4M3's subnormals and lose precision, those below ~2^-18 of it are
            stored as 0 (CPU, depth None: one value 2^16 / 2^20 above the rest gave a relative
            error of 8e-3 / 0.39 against bf16 V's 1.6e-3). Use bf16 / fp16 V for values of
            such a spread.
        page_size: tokens per page, a positive multiple of 64. Default 256: measured on the
            H200 against 64, 128 and 512 (same keys, graphed, interleaved), the screened
            split (a finite depth) is 1.4-2.6% faster with 256-token pages than with 128
            (fewer pages per split: fewer page-table reads and cut-page mean rows), the dense
            path is unchanged (its bits do not depend on the page size) and the errors are
            the same; 512 gains up to 1% more but raised one case's error. A request's
            capacity is whole pages, so a small max_len may prefer a smaller page.
        softmax_scale: defaults to 1/sqrt(head_dim).
        refine_band: plane B of K is read for keys within this many binades of Z
            (default 8); plane B of V (v8) within refine_band + 2.
        v_scale: v8 only: a fixed power-of-two V scale (values beyond 448 * v_scale raise);
            None: chosen per request from its own data, raised (re-quantising the request's
            V planes) when a later value would not fit.
        dtype: torch.bfloat16 or torch.float16 (queries, keys, values, outputs).
        device: 'cpu' (the C++ reference) or a CUDA device (the CUDA kernels; the v8
            exponent growth and the heavy-key list run on the device too). None (default):
            torch's default device (torch.get_default_device(): the CPU unless set, e.g. by
            torch.set_default_device('cuda') or inside ``with torch.device('cuda'):``), as
            torch's own factories place tensors.
        num_pages: pages in the pool the slots share (the pool's memory is num_pages x
            n_kv_heads x (page_size x (4 x head_dim + 2) + 4 x head_dim) bytes: two K planes,
            V (bf16 / fp16, or v8's two planes) and a scale per token, and a mean V row per
            page). None: batch x ceil(max_len / page_size), every slot's whole capacity. Fewer pages
            serve more slots than fit at max_len together: a request takes a page when its
            tokens reach it and returns its pages on release, and an append, add_request,
            prefill or step that needs more pages than are free raises PagePoolExhausted
            before changing the cache (`free_pages` and `pages_needed` tell a scheduler in
            advance). Which pages a request gets never changes its output's bits. Compiled
            and captured steps do not reserve pages (see fold_attn_with_kvcache).
        window_size: None, or a sliding window (left, right) that every prefill and step of
            this cache takes (FlashAttention's convention; a step's query sees its request's
            last left + 1 keys). The cache is then pinned to it: it forgets each request's keys
            before the page that holds key L - left - 1 (L: the request's length) and returns
            those pages to the pool after every eager append or step, so a request holds about
            (left + 1) / page_size + 1 pages however long it grows (with num_pages, a
            sliding-window layer's cache needs only that). Calls may omit window_size (the
            cache's applies) or pass the same left; any other window raises ValueError.

    The buffers (k_a, k_b, k_scale, v / v_a / v_b, v_exp, v_page_sum, heavy_keys, page_table,
    lengths) belong to the cache: read them, but change them only through its methods (the
    kernels are given their addresses once; rebinding an attribute is not supported).
    """

    def __init__(
        self,
        batch,
        n_heads,
        n_kv_heads,
        head_dim,
        max_len,
        depth=16,
        v8=False,
        page_size=256,
        softmax_scale=None,
        refine_band=None,
        v_scale=None,
        dtype=torch.bfloat16,
        device=None,
        num_pages=None,
        window_size=None,
    ):
        fn = "FoldKVCache"
        self.batch = require_int(batch, "batch", fn, minimum=1, maximum=2**31 - 1)
        # (The C descriptor holds these as int32.)
        self.n_heads = require_int(n_heads, "n_heads", fn, minimum=1, maximum=2**31 - 1)
        self.n_kv_heads = require_int(n_kv_heads, "n_kv_heads", fn, minimum=1, maximum=2**31 - 1)
        if self.n_heads % self.n_kv_heads != 0:
            raise ValueError(
                f"{fn}: n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})"
            )
        if self.n_heads // self.n_kv_heads > _MAX_GROUP:
            raise ValueError(
                f"{fn}: the group size n_heads / n_kv_heads = {self.n_heads // self.n_kv_heads} "
                f"exceeds {_MAX_GROUP}"
            )
        self.head_dim = require_int(head_dim, "head_dim", fn)
        if self.head_dim not in _HEAD_DIMS:
            raise ValueError(f"{fn}: head_dim must be 64, 128 or 256, got {self.head_dim}")
        self.max_len = require_int(max_len, "max_len", fn, minimum=1, maximum=2**31 - 1)
        if depth is not None:
            depth = _float32(depth, "depth", fn, positive=True)
        self.depth = depth
        self.v8 = require_flag(v8, "v8", fn)
        self.page_size = require_int(page_size, "page_size", fn, minimum=64, maximum=2**30)
        if self.page_size % 64 != 0:
            raise ValueError(f"{fn}: page_size must be a multiple of 64, got {self.page_size}")
        self.softmax_scale = check_softmax_scale(softmax_scale, self.head_dim, fn)
        self.refine_band = _band(refine_band, "refine_band", fn, DEFAULT_REFINE_BAND)
        self.v_scale = None
        self._v_exp_fixed = None
        if v_scale is not None:
            if not self.v8:
                raise ValueError(f"{fn}: v_scale applies only with v8=True")
            if isinstance(v_scale, bool) or not isinstance(v_scale, numbers.Real):
                raise TypeError(f"{fn}: v_scale must be a number or None, got {type(v_scale).__name__}")
            try:
                value = float(v_scale)
            except OverflowError:
                value = math.inf  # (an int beyond float's range: refused below)
            mant, exp = math.frexp(value) if math.isfinite(value) and value > 0 else (0.0, 0)
            if mant != 0.5 or not -120 <= exp - 1 <= 120:
                raise ValueError(f"{fn}: v_scale must be a power of two in [2^-120, 2^120], got {v_scale!r}")
            self.v_scale = value
            self._v_exp_fixed = exp - 1
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"{fn}: dtype must be a torch.dtype, got {type(dtype).__name__}")
        if dtype not in _CACHE_DTYPES:
            raise TypeError(f"{fn}: dtype must be torch.bfloat16 or torch.float16, got {dtype}")
        self.dtype = dtype
        if device is None:
            device = torch.get_default_device()
        if not isinstance(device, (str, int, torch.device)):
            raise TypeError(f"{fn}: device must be a torch.device, str or int, got {type(device).__name__}")
        try:
            self.device = torch.device(device)
        except (RuntimeError, ValueError) as e:
            raise ValueError(f"{fn}: device {device!r} is not a valid torch device ({e})") from None
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else self.device
        _require_cpu(self.device, "the cache", fn, self.device)
        self.window_size = None
        self._pinned = 0  # fold_kvcache_t::pinned_window
        if window_size is not None:
            before, _ = check_window_size(window_size, fn)
            self.window_size = tuple(int(x) for x in window_size)
            self._pinned = before if before < self.max_len else 0  # (0: hides nothing)

        self.pages_per_request = -(-self.max_len // self.page_size)
        full = self.batch * self.pages_per_request  # every slot at max_len
        if num_pages is None:
            if full > 2**31 - 1:
                raise ValueError(f"{fn}: batch * ceil(max_len / page_size) exceeds int32 pages; "
                                 "pass a smaller num_pages")
            self.num_pages = full
        else:
            self.num_pages = require_int(num_pages, "num_pages", fn, minimum=1, maximum=2**31 - 1)
            if self.num_pages > full:
                raise ValueError(
                    f"{fn}: num_pages ({self.num_pages}) exceeds batch x ceil(max_len / page_size) "
                    f"= {full}, the most the slots can ever hold"
                )
        P, Hk, S, D = self.num_pages, self.n_kv_heads, self.page_size, self.head_dim
        dev = self.device
        if self.is_cuda and (self.batch > 65535 or Hk > 65535):  # (the kernels' grid dimensions)
            raise NotImplementedError(f"{fn}: the CUDA decode takes batch and n_kv_heads <= 65535")
        # The buffers are ordinary tensors even when the cache is built under
        # torch.inference_mode() (inference tensors could not be updated outside it later), and
        # a pool too large to allocate is refused naming its sizes, not with the allocator's
        # bare error.
        pool = P * Hk * S * (4 * D + 2) + P * Hk * D * 4
        try:
            with torch.inference_mode(False):
                self.k_a = torch.zeros((P, Hk, S, D), dtype=torch.int8, device=dev)
                self.k_b = torch.zeros((P, Hk, S, D), dtype=torch.int8, device=dev)
                self.k_scale = torch.zeros((P, Hk, S), dtype=torch.bfloat16, device=dev)
                if self.v8:
                    self.v = None
                    self.v_a = torch.zeros((P, Hk, S, D), dtype=torch.uint8, device=dev)
                    self.v_b = torch.zeros((P, Hk, S, D), dtype=torch.uint8, device=dev)
                else:
                    self.v = torch.zeros((P, Hk, S, D), dtype=dtype, device=dev)
                    self.v_a = self.v_b = None
                self.v_exp = torch.full((self.batch, Hk), self._initial_v_exp(), dtype=torch.int32, device=dev)
                self.v_page_sum = torch.zeros((P, Hk, D), dtype=torch.float32, device=dev)
                self.heavy_keys = torch.full((self.batch, Hk, HEAVY_KEYS), -1, dtype=torch.int32, device=dev)
                self.page_table = torch.full((self.batch, self.pages_per_request), -1, dtype=torch.int32, device=dev)
                self.lengths = torch.full((self.batch,), -1, dtype=torch.int32, device=dev)
        except (RuntimeError, MemoryError) as e:
            if "alloc" not in str(e).lower() and "memory" not in str(e).lower():
                raise
            # The same kind of error (out-of-memory handlers, e.g. ones that retry smaller, look
            # for it), saying which sizes asked for the memory.
            kind = torch.OutOfMemoryError if isinstance(e, torch.OutOfMemoryError) else MemoryError
            raise kind(
                f"{fn}: the cache's pool ({pool / 2**30:.1f} GiB: num_pages {P} of {S} tokens "
                f"(batch {self.batch}, max_len {self.max_len}) x n_kv_heads {Hk} x head_dim {D}) "
                f"could not be allocated on {dev}"
            ) from e
        # Free pages, popped from the end: a released request's pages are the next reused.
        self._free_pages = list(range(P - 1, -1, -1))
        self._pages_host = [[-1] * self.pages_per_request for _ in range(self.batch)]
        self._reserved = [0] * self.batch  # request b holds logical pages 0 .. _reserved[b] - 1
        self._forgotten = [0] * self.batch  # ... of which 0 .. _forgotten[b] - 1 went back (pinned)
        self._shared = {}  # page -> how many requests hold it beyond one (fork)
        self._last_stats: dict | None = None
        self._cdesc: FoldKVCacheDesc | None = None  # _c_desc()
        self._stats_pending = False
        # The step's workspace (CUDA) and counters, made once, so that every step (and a
        # captured graph, or a compiled step) uses the same buffers.
        with torch.inference_mode(False):
            self._stats_dev = torch.zeros(STATS_COUNTERS, dtype=torch.int64, device=dev)
            if self.is_cuda:
                size = int(library().fold_decode_cuda_workspace_size(ctypes.byref(self._desc()), self.n_heads))
                if size == 0:
                    raise ValueError(f"{fn}: {_lib.last_error()}")
                self._workspace = torch.empty(max(size, 256), dtype=torch.uint8, device=dev)
            else:
                self._workspace = torch.empty(0, dtype=torch.uint8, device=dev)

    # ---- bookkeeping -----------------------------------------------------------------

    def _initial_v_exp(self) -> int:
        return self._v_exp_fixed if self._v_exp_fixed is not None else V_EXP_UNSET

    def _desc(self) -> FoldKVCacheDesc:
        return FoldKVCacheDesc(
            batch=self.batch,
            n_kv_heads=self.n_kv_heads,
            head_dim=self.head_dim,
            page_size=self.page_size,
            max_len=self.max_len,
            pages_per_request=self.pages_per_request,
            num_pages=self.num_pages,
            dtype=DTYPE_CODES[self.dtype],
            v8=1 if self.v8 else 0,
            v_exp_fixed=1 if self._v_exp_fixed is not None else 0,
            k_a=_ptr(self.k_a),
            k_b=_ptr(self.k_b),
            k_scale=_ptr(self.k_scale),
            v=_ptr(self.v),
            v_a=_ptr(self.v_a),
            v_b=_ptr(self.v_b),
            v_exp=_ptr(self.v_exp),
            v_page_sum=_ptr(self.v_page_sum),
            heavy_keys=_ptr(self.heavy_keys),
            page_table=_ptr(self.page_table),
            lengths=_ptr(self.lengths),
            pinned_window=self._pinned,
        )

    def _check_request(self, request, fn: str, active: bool = True) -> int:
        b = require_int(request, "request", fn, minimum=0, maximum=self.batch - 1)
        if active and int(self.lengths[b]) < 0:
            raise ValueError(f"{fn}: request {b} is not active (released or never added)")
        return b

    @property
    def free_pages(self) -> int:
        """Pages of the pool no request holds."""
        return len(self._free_pages)

    def pages_needed(self, request, tokens=1) -> int:
        """Pages request `request` (active) would take from the pool to append `tokens` more
        tokens (0 while its last page has room): for a cache pinned to a window, at the peak of
        the append's chunks (pages go back between them)."""
        fn = "FoldKVCache.pages_needed"
        b = self._check_request(request, fn)
        room = self.max_len - int(self.lengths[b])
        n = require_int(tokens, "tokens", fn, minimum=0, maximum=room)
        return self._append_pages(b, n)

    def _new_pages(self, b: int, length: int) -> int:
        return max(0, -(-length // self.page_size) - self._reserved[b])

    def _require_pages(self, needed: int, fn: str, what: str) -> None:
        """Raises PagePoolExhausted, before anything changes, if `needed` pages are not free."""
        if needed > len(self._free_pages):
            raise PagePoolExhausted(
                f"{fn}: {what} needs {needed} more pages of {self.page_size} tokens, but only "
                f"{len(self._free_pages)} of the pool's {self.num_pages} are free; release a "
                "request or build the cache with a larger num_pages"
            )

    def _reserve(self, b: int, length: int, fn: str = "FoldKVCache") -> None:
        """Gives request b pages for tokens [0, length). The page table changes only here
        and in release (never on the device), so a host copy answers without a sync. A
        request's pages are always its first `_reserved[b]` logical pages, so a step costs
        one comparison unless it opens a page (not a walk over the request's pages)."""
        needed = -(-length // self.page_size)
        have = self._reserved[b]
        if needed <= have:
            return
        self._require_pages(needed - have, fn, f"request {b} at {length} tokens")
        row = self._pages_host[b]
        for i in range(have, needed):
            row[i] = self._free_pages.pop()
        self._reserved[b] = needed
        self.page_table[b, have:needed] = torch.tensor(row[have:needed], dtype=torch.int32, device="cpu")

    def _unreserve(self, b: int, have: int) -> None:
        """Undoes _reserve back to `have` logical pages (pages returned in the order they were
        taken, so the free list is as it was)."""
        row = self._pages_host[b]
        for i in range(self._reserved[b] - 1, have - 1, -1):
            self._free_pages.append(row[i])
            row[i] = -1
        self.page_table[b, have:self._reserved[b]] = -1
        self._reserved[b] = have

    def _kept_pages(self, length: int) -> int:
        """The logical pages a pinned cache has forgotten of a request of `length` tokens: those
        below kept(length) = page_size floor((length - w) / page_size) (decode.h); 0 unpinned."""
        return (length - self._pinned) // self.page_size if self._pinned and length > self._pinned else 0

    def _forget_early_pages(self, b: int, length: int) -> None:
        """A pinned cache: returns request b's pages below kept(length) (decode.h) to the pool.
        No later call reads them (the writers keep no state about their keys)."""
        first = self._kept_pages(length)
        lo = self._forgotten[b]
        if first <= lo:
            return
        row = self._pages_host[b]
        for i in range(lo, first):
            if row[i] >= 0:
                self._drop_page(row[i])
                row[i] = -1
        self._forgotten[b] = first
        self.page_table[b, lo:first] = -1

    def _drop_page(self, page: int) -> None:
        """A request lets go of `page`: back to the pool unless another request (fork) holds it."""
        holders = self._shared.get(page, 0)
        if holders:
            if holders == 1:
                del self._shared[page]
            else:
                self._shared[page] = holders - 1
        else:
            self._free_pages.append(page)

    def _copy_page(self, dst: int, src: int) -> None:
        """Pool page src's contents (K planes and scales, V, its V sums) into page dst."""
        for t in (self.k_a, self.k_b, self.k_scale, self.v, self.v_a, self.v_b, self.v_page_sum):
            if t is not None:
                t[dst].copy_(t[src])

    def _activate(self, b: int) -> None:
        self.lengths[b] = 0
        self.heavy_keys[b].fill_(-1)
        self.v_exp[b].fill_(self._initial_v_exp())

    @property
    def active(self) -> list[int]:
        """Indices of the active request slots."""
        return [b for b, n in enumerate(self.lengths.tolist()) if n >= 0]

    def length(self, request) -> int:
        """Tokens held by a request (-1 for a free slot)."""
        b = self._check_request(request, "FoldKVCache.length", active=False)
        return int(self.lengths[b])

    def add_request(self, length=0) -> int:
        """Claims the lowest free slot for a new, empty request and returns its index.

        `length` reserves pages for that many tokens up front (0..max_len); the request
        still starts empty. Its pages come from the free list (a released request's pages
        are reused); no other request is touched.
        """
        fn = "FoldKVCache.add_request"
        n = require_int(length, "length", fn, minimum=0, maximum=self.max_len)
        free = [b for b, x in enumerate(self.lengths.tolist()) if x < 0]
        if not free:
            raise ValueError(f"{fn}: every one of the {self.batch} request slots is in use; release one first")
        b = free[0]
        self._require_pages(-(-n // self.page_size), fn, f"a request of length {n}")
        self._activate(b)
        self._reserve(b, n, fn)
        return b

    def release(self, request) -> None:
        """Frees a request's slot and returns its pages to the free list."""
        fn = "FoldKVCache.release"
        b = self._check_request(request, fn)
        pages = [p for p in self._pages_host[b] if p >= 0]
        for p in reversed(pages):
            self._drop_page(p)
        self._pages_host[b] = [-1] * self.pages_per_request
        self._reserved[b] = 0
        self._forgotten[b] = 0
        self.page_table[b].fill_(-1)
        self.lengths[b] = -1
        self.heavy_keys[b].fill_(-1)
        self.v_exp[b].fill_(self._initial_v_exp())

    def fork(self, request) -> int:
        """A new request holding the same tokens as active request `request` (a shared prompt,
        parallel samples, beam search), in the lowest free slot; returns its index.

        The two share the pages `request`'s tokens fill: the new one takes a page of its own
        only for a last, partly filled page (a copy), so a fork costs at most one page. Tokens
        are only ever appended past a request's length, so a shared page is never written again,
        and each request's later outputs are the bits a request built from its own tokens alone
        would give. A page returns to the pool when the last request holding it lets it go.
        v8 caches need a fixed v_scale (a growing scale re-writes a request's stored values)."""
        fn = "FoldKVCache.fork"
        b = self._check_request(request, fn)
        if self.v8 and self._v_exp_fixed is None:
            raise ValueError(
                f"{fn}: a v8 cache without a fixed v_scale re-quantises a request's stored values "
                "when a larger one arrives, which would change pages two requests share; build the "
                "cache with v_scale= (or bf16 / fp16 values) to fork"
            )
        free = [x for x, n in enumerate(self.lengths.tolist()) if n < 0]
        if not free:
            raise ValueError(f"{fn}: every one of the {self.batch} request slots is in use; release one first")
        L, P = int(self.lengths[b]), self.page_size
        full, partial = L // P, L % P != 0
        self._require_pages(1 if partial else 0, fn, f"a fork of request {b} (its last page's copy)")
        n = free[0]
        src, row = self._pages_host[b], self._pages_host[n]
        for i in range(self._forgotten[b], full):
            row[i] = src[i]
            self._shared[src[i]] = self._shared.get(src[i], 0) + 1
        self._forgotten[n] = self._forgotten[b]
        self._reserved[n] = full
        if partial:
            row[full] = page = self._free_pages.pop()
            self._reserved[n] = full + 1
            self._copy_page(page, src[full])
        kept = row[: self._reserved[n]]
        self.page_table[n, : self._reserved[n]] = torch.tensor(kept, dtype=torch.int32, device="cpu")
        self.heavy_keys[n].copy_(self.heavy_keys[b])
        self.v_exp[n].copy_(self.v_exp[b])
        self.lengths[n] = L
        return n

    def truncate(self, request, length) -> None:
        """Cuts active request `request` back to its first `length` tokens (0 <= length <= its
        length): the tokens past it are forgotten, as after a speculative draft whose tail was
        rejected. Later outputs and writes are the bits of a request that only ever received
        those `length` tokens (the heavy-key list and the V sum of the page the cut falls in are
        rebuilt from the kept keys where the cut tokens changed them).

        The request keeps the pages of its own (the next tokens are written into them, so a
        reservation made with add_request(length=...) for captured steps still stands). Pages it
        shares with a fork (fork()) past the cut are let go, and a shared page the cut falls
        inside is replaced by a copy of its own (the one page this can take from the pool:
        PagePoolExhausted before anything changes if none is free). length equal to the
        request's length changes nothing. Not for v8 caches (their V sums cannot be rebuilt from
        the stored E4M3 values) nor caches pinned to a window (their heavy lists depend on keys
        they no longer hold)."""
        fn = "FoldKVCache.truncate"
        b = self._check_request(request, fn)
        L = int(self.lengths[b])
        n = require_int(length, "length", fn, minimum=0, maximum=L)
        if n == L:
            return
        if self.v8:
            raise ValueError(f"{fn}: a v8 cache cannot be truncated (the V sum of a page cut in "
                             "two cannot be rebuilt from its E4M3 values)")
        if self._pinned:
            raise ValueError(f"{fn}: a cache pinned to a window cannot be truncated (its heavy-key "
                             "lists depend on keys it no longer holds)")
        P = self.page_size
        row = self._pages_host[b]
        first = n // P  # the first logical page the next token writes
        copy = n % P != 0 and row[first] in self._shared
        self._require_pages(1 if copy else 0, fn,
                            f"truncating request {b} (a copy of the page it shares with a fork)")
        # From `first` on: a shared page the cut falls inside is copied (its kept rows); the
        # other shared pages are let go (their rows are the other holders'); the request's own
        # pages move down behind them, so that its pages stay its first _reserved[b] ones.
        tail = []
        for i in range(first, self._reserved[b]):
            page = row[i]
            if page not in self._shared:
                tail.append(page)
                continue
            if i == first and copy:
                new = self._free_pages.pop()
                self._copy_page(new, page)
                tail.append(new)
            self._drop_page(page)
        end = self._reserved[b]
        row[first:end] = tail + [-1] * (end - first - len(tail))
        self._reserved[b] = first + len(tail)
        self.page_table[b, first:end] = torch.tensor(row[first:end], dtype=torch.int32, device="cpu")
        if n % P:
            self.v_page_sum[row[first]] = page_sum(self.v, row[first], n % P)
        heavy = self.heavy_keys[b]
        if bool((heavy >= n).any()):
            heavy.copy_(heavy_list(self.k_scale, row, n, heavy.shape[1]))
        self.lengths[b] = n

    def reset(self) -> None:
        """Releases every active request."""
        for b in self.active:
            self.release(b)

    # ---- writing -------------------------------------------------------------------

    def _check_rows(self, x, name: str, fn: str, heads: int, tokens: int | None = None):
        x = require_tensor(x, name, fn)
        if x.dim() != 3:
            raise ValueError(f"{fn}: {name} must be 3-D (tokens, heads, head_dim), got shape {tuple(x.shape)}")
        if x.dtype != self.dtype:
            raise TypeError(f"{fn}: {name} has dtype {x.dtype} but the cache holds {self.dtype}")
        if x.device != self.device:  # (on the cache's own device: accepted, as _require_cpu would)
            _require_cpu(x.device, name, fn, self.device)
        if x.shape[1] != heads or x.shape[2] != self.head_dim:
            raise ValueError(
                f"{fn}: {name} must have shape (tokens, {heads}, {self.head_dim}), got {tuple(x.shape)}"
            )
        if tokens is not None and x.shape[0] != tokens:
            raise ValueError(f"{fn}: {name} has {x.shape[0]} tokens, expected {tokens}")
        return x.contiguous()

    def _check_keys(self, k: torch.Tensor, fn: str, kn="k") -> None:
        """Keys an append refuses: non-finite ones, and ones whose Hadamard rotation overflows
        float32 (the cache writers sum D values per rotated element, unnormalised, in float32).
        One reduction, as a finiteness test alone: fp16 keys (|k| <= 65504) can never overflow,
        and bf16 keys within FLT_MAX / D cannot; only beyond that the exact butterflies run."""
        if not k.numel():
            return
        if self.dtype == torch.float16:
            if not bool(torch.isfinite(k).all()):
                raise ValueError(f"{fn}: {kn} holds a non-finite value")
            return
        # 2^(127 - log2 D) <= FLT_MAX / D: a power of two, exact in bf16 (a bf16 rounding of
        # FLT_MAX / D could lie above it).
        if bool((k.abs() < 2.0 ** (128 - self.head_dim.bit_length())).all()):  # (NaN, inf: False)
            return
        if not bool(torch.isfinite(k).all()):
            raise ValueError(f"{fn}: {kn} holds a non-finite value")
        if not _rotation_finite(k.reshape(-1, self.head_dim).float()):
            raise ValueError(f"{fn}: {kn} is too large: its Hadamard rotation overflows float32")

    def _check_values(self, k: torch.Tensor, v: torch.Tensor, fn: str, kn="k", vn="v") -> None:
        """Everything an append refuses, checked before any byte of the cache changes (so a
        prefill, which releases its slots first, cannot fail halfway): non-finite keys and
        values, keys whose Hadamard rotation overflows float32, V beyond a fixed v_scale."""
        self._check_keys(k, fn, kn)
        if not bool(torch.isfinite(v).all()):
            raise ValueError(f"{fn}: {vn} holds a non-finite value")
        if self.v_scale is not None and v.numel():
            amax = float(v.float().abs().max())
            if amax > _E4M3_MAX * self.v_scale:
                raise ValueError(
                    f"{fn}: {vn} holds |v| = {amax} beyond the fixed v_scale range "
                    f"448 * {self.v_scale}"
                )

    def _plain_values(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
        """True if q, k, v pass every value check of prefill_request (_check_values, q finite,
        q's scaled rotation finite) by the sufficient bounds alone, in one device read: |k| and
        |q x softmax_scale x log2 e| (float32) below 2^(127 - log2 D) (their rotations' sums stay
        below FLT_MAX; NaN and inf fail), v finite. False means: run the checks one by one (they
        name the failing input), also for a cache with a fixed v_scale."""
        if self.v_scale is not None:
            return False
        top = 2.0 ** (128 - self.head_dim.bit_length())
        ok = torch.stack([k.abs().lt(top).all(), v.abs().lt(math.inf).all(),
                          (q.float() * _query_scale(self.softmax_scale)).abs().lt(top).all()])
        return bool(ok.all())

    def _chunks(self, length: int, n: int):
        """The appends that write tokens [length, length + n): one, or for a cache pinned to a
        window, chunks ending on multiples of C = the window rounded up to whole pages (at least
        one page), so that a long prompt's early pages go back to the pool as it is written."""
        if not self._pinned:
            return [(length, length + n)]
        c = -(-self._pinned // self.page_size) * self.page_size
        out, lo = [], length
        while lo < length + n:
            hi = min((lo // c + 1) * c, length + n)
            out.append((lo, hi))
            lo = hi
        return out

    def _returns(self, b: int, lo: int, hi: int, had: int) -> int:
        """Pages the pool gets back when request b forgets logical pages [lo, hi) (pinned): pages
        taken during the operation (index >= `had`, its reserved count before) always; pages it
        held before only if no other request (fork) holds them too. (Two holders forgetting a
        shared page in one operation would return it: not counted, so the count errs high.)"""
        row = self._pages_host[b]
        return sum(1 for i in range(lo, hi) if i >= had or (row[i] >= 0 and row[i] not in self._shared))

    def _taken(self, b: int, ends, reserved: int, forgotten: int) -> tuple[list, int]:
        """Request b growing through the lengths `ends` (increasing), from `reserved` logical
        pages of which `forgotten` went back: for each end, the pages taken from the pool once
        its tokens have pages (before a pinned cache returns the ones below its window), and
        what stays taken after the last."""
        had, taken, tops = reserved, 0, []
        for hi in ends:
            need = -(-hi // self.page_size)
            if need > reserved:
                taken += need - reserved
                reserved = need
            tops.append(taken)
            first = self._kept_pages(hi)
            if first > forgotten:
                taken -= self._returns(b, forgotten, first, had)
                forgotten = first
        return tops, taken

    def _growth(self, b: int, length: int, n: int, reserved: int, forgotten: int) -> tuple[int, int]:
        """(peak, final): the most pages appending tokens [length, length + n) to request b (in
        _chunks) takes from the pool at once, and what it has taken after, from `reserved`
        logical pages of which `forgotten` went back."""
        tops, final = self._taken(b, [hi for _, hi in self._chunks(length, n)], reserved, forgotten)
        return max(tops, default=0), final

    def _steps_pages(self, active, lengths, n: int) -> int:
        """Pages n steps that append to every active request take from the pool at their peak
        (a pinned cache returns pages after each step)."""
        tops = [self._taken(b, range(lengths[b] + 1, lengths[b] + n + 1), self._reserved[b],
                            self._forgotten[b])[0] for b in active]
        return max((sum(t[i] for t in tops) for i in range(n)), default=0)

    def _append_pages(self, b: int, n: int, length: int | None = None) -> int:
        """Pages appending n tokens to request b (`length` tokens now: read from the device if
        not given) takes from the pool at its peak."""
        length = int(self.lengths[b]) if length is None else length
        peak, _ = self._growth(b, length, n, self._reserved[b], self._forgotten[b])
        return peak

    def _append(self, b: int, k: torch.Tensor, v: torch.Tensor, fn: str, length: int | None = None) -> None:
        """Writes k, v after request b's `length` tokens (read from the device if not given: a
        caller that has read it passes it, each read being a device sync)."""
        n = k.shape[0]
        if n == 0:
            return
        length = int(self.lengths[b]) if length is None else length
        if length + n > self.max_len:
            raise ValueError(
                f"{fn}: request {b} is full: {length} + {n} tokens exceed max_len {self.max_len}"
            )
        self._require_pages(self._append_pages(b, n, length), fn, f"appending {n} tokens to request {b}")
        D = self.head_dim
        desc = self._desc()
        for lo, hi in self._chunks(length, n):
            self._reserve(b, hi, fn)
            kt = FoldTensor(k[lo - length:].data_ptr(), 0, k.shape[1] * D, D)
            vt = FoldTensor(v[lo - length:].data_ptr(), 0, v.shape[1] * D, D)
            if self.is_cuda:
                with device_scope(self.device):
                    status = library().fold_kvcache_append_cuda(ctypes.byref(desc), b, hi - lo, kt, vt,
                                                                stream_handle(self.device))
                _lib.check(status, "fold_kvcache_append_cuda")
            else:
                status = library().fold_kvcache_append_cpu(ctypes.byref(desc), b, hi - lo, kt, vt)
                _lib.check(status, "fold_kvcache_append_cpu")
            self._forget_early_pages(b, hi)

    def extend(self, request, k, v) -> None:
        """Appends tokens k, v (tokens, n_kv_heads, head_dim) to an active request, without
        attending (e.g. a prompt whose output is not needed)."""
        fn = "FoldKVCache.extend"
        b = self._check_request(request, fn)
        k = self._check_rows(k, "k", fn, self.n_kv_heads)
        v = self._check_rows(v, "v", fn, self.n_kv_heads, tokens=k.shape[0])
        self._check_values(k, v, fn)
        self._append(b, k, v, fn)

    def _call_window(self, window_size, fn: str):
        """A call's window_size: None means the cache's (or no window); a pinned cache takes
        only its own left."""
        if window_size is None:
            return self.window_size if self.window_size is not None else (-1, -1)
        before, _ = check_window_size(window_size, fn)
        if self._pinned and before != self._pinned:
            raise ValueError(
                f"{fn}: window_size {tuple(window_size)!r} differs from the window the cache is "
                f"pinned to, {self.window_size!r} (it keeps no keys before that window)"
            )
        return window_size

    def prefill(self, q, k, v, cu_seqlens, window_size=None, sinks=None):
        """Runs causal attention over packed prompts and writes them into slots 0..batch-1.

        q (total, n_heads, head_dim), k/v (total, n_kv_heads, head_dim), cu_seqlens int32
        with batch + 1 offsets. Every slot is (re)started with its prompt (a slot that was
        active is released first). Returns the prompt output (total, n_heads, head_dim).
        window_size and sinks as in fold_attn_varlen_func (a layer's sliding window and
        attention sinks; the steps take the same arguments). window_size None: the cache's
        (see the constructor), else (-1, -1). The cache keeps every token unless pinned to a
        window.
        """
        from .training import fold_attn_varlen_func

        fn = "FoldKVCache.prefill"
        window_size = self._call_window(window_size, fn)
        q = self._check_rows(q, "q", fn, self.n_heads)
        k = self._check_rows(k, "k", fn, self.n_kv_heads, tokens=q.shape[0])
        v = self._check_rows(v, "v", fn, self.n_kv_heads, tokens=q.shape[0])
        cu = require_tensor(cu_seqlens, "cu_seqlens", fn)
        if cu.dim() != 1 or cu.numel() != self.batch + 1:
            raise ValueError(
                f"{fn}: cu_seqlens must hold batch + 1 = {self.batch + 1} offsets, got shape {tuple(cu.shape)}"
            )
        if cu.dtype != torch.int32:
            raise TypeError(f"{fn}: cu_seqlens must have dtype torch.int32, got {cu.dtype}")
        if cu.device.type != "cpu":
            _require_cpu(cu.device, "cu_seqlens", fn, self.device)
        offsets = cu.tolist()
        cu = cu.to(q.device)
        for b in range(self.batch):
            n = offsets[b + 1] - offsets[b]
            if n > self.max_len:
                raise ValueError(
                    f"{fn}: cu_seqlens gives request {b} {n} tokens, beyond max_len {self.max_len}"
                )
        # Every check before the slots are released: a failed prefill leaves the cache as it was.
        # Every slot restarts empty; request b's prompt is written while requests 0..b-1 hold
        # what their prompts left them.
        pages = held = 0
        for b in range(self.batch):
            peak, final = self._growth(b, 0, offsets[b + 1] - offsets[b], 0, 0)
            pages = max(pages, held + peak)
            held += final
        if pages > self.num_pages:
            raise PagePoolExhausted(
                f"{fn}: the prompts need {pages} pages of {self.page_size} tokens, beyond the "
                f"pool's num_pages {self.num_pages}"
            )
        self._check_values(k, v, fn)
        if not bool(torch.isfinite(q).all()):
            raise ValueError(f"{fn}: q holds a non-finite value")
        if sinks is not None:  # (NaN or +inf would reach every row; the steps refuse them too)
            _check_sink_values(_step_sinks(sinks, self, fn), fn)
        out = fold_attn_varlen_func(q, k, v, cu, causal=True, softmax_scale=self.softmax_scale,
                                    window_size=window_size, sinks=sinks)
        for b in range(self.batch):
            if int(self.lengths[b]) >= 0:
                self.release(b)
        for b in range(self.batch):
            self._activate(b)
            lo, hi = offsets[b], offsets[b + 1]
            self._append(b, k[lo:hi], v[lo:hi], fn)
        return out

    def prefill_request(self, request, q, k, v, window_size=None, sinks=None):
        """Causal attention over one chunk of tokens q (n, n_heads, D), k/v (n, n_kv_heads, D)
        of an active request (see add_request), and its write into the cache. Returns the
        output (n, n_heads, D).

        An empty request takes a prompt: the training forward over the chunk. A request that
        holds L tokens takes the chunk after them (a conversation's next turn, a prompt's
        suffix after fork()): token t sits at position L + t and sees the request's L cached
        keys and the chunk's tokens 0..t. The cached part is read from the cache's planes by
        dense decode steps (every key, whatever the cache's depth; the chunk's queries of one
        KV head ride as rows of one group, 64 // group size tokens per step, so each step reads
        the history once for that many tokens), the chunk's own part by the training forward
        over its bf16 / fp16 keys, and the two join through their LSEs in float32. A sliding
        window that cuts the history for some of the chunk's tokens takes another route: the
        history keys the first token sees (at most 2,048 of them, else the route above), read
        back from the planes, join the chunk in one forward. window_size and sinks as in
        prefill (positions count from the request's first token)."""
        from .training import fold_attn_func, fold_attn_varlen_func

        fn = "FoldKVCache.prefill_request"
        window_size = self._call_window(window_size, fn)
        b = self._check_request(request, fn, active=False)
        held = int(self.lengths[b])  # (the one device read of the length this call makes)
        if held < 0:
            raise ValueError(f"{fn}: request {b} is not active (released or never added)")
        q = self._check_rows(q, "q", fn, self.n_heads)
        k = self._check_rows(k, "k", fn, self.n_kv_heads, tokens=q.shape[0])
        v = self._check_rows(v, "v", fn, self.n_kv_heads, tokens=q.shape[0])
        if held + q.shape[0] > self.max_len:
            what = f"the prompt has {q.shape[0]} tokens" if held == 0 else (
                f"request {b} holds {held} tokens: the chunk's {q.shape[0]} more exceed")
            raise ValueError(f"{fn}: {what}, beyond max_len {self.max_len}")
        self._require_pages(self._append_pages(b, q.shape[0], held), fn,
                            f"request {b}'s {'chunk' if held else 'prompt'} of {q.shape[0]} tokens")
        plain = self._plain_values(q, k, v)  # (one device read where every check passes)
        if not plain:
            self._check_values(k, v, fn)
            if not bool(torch.isfinite(q).all()):
                raise ValueError(f"{fn}: q holds a non-finite value")
        if sinks is not None:  # (NaN or +inf would reach every row; the steps refuse them too)
            _check_sink_values(_step_sinks(sinks, self, fn), fn)
        if held and q.shape[0]:
            if torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v)):
                # The history's decode steps have no backward: a gradient through the chunk's
                # own part alone would be silently wrong.
                raise ValueError(f"{fn}: a chunk after request {b}'s history has no backward; "
                                 "pass tensors that do not require grad (or use torch.no_grad())")
            if not plain and not _query_rotation_finite(q, self.softmax_scale):
                raise ValueError(f"{fn}: q is too large: a row is not finite after scaling and "
                                 "rotation")
        def forward(q, k, v, return_lse=False):
            # One request: the dense call (B = 1) gives the bits of the varlen call over
            # cu_seqlens [0, n], without the offsets' device read that validates them.
            r = fold_attn_func(q[None], k[None], v[None], causal=True, softmax_scale=self.softmax_scale,
                               window_size=window_size, sinks=sinks, return_lse=return_lse)
            return (r[0][0], r[1][0]) if return_lse else r[0]

        before = check_window_size(window_size, fn)[0]
        tail = _history.windowed_tail(self, held, q.shape[0], before) if held and q.shape[0] else 0
        if q.shape[0] == 0:
            cu = torch.zeros(2, dtype=torch.int32, device=q.device)
            out = fold_attn_varlen_func(q, k, v, cu, causal=True, softmax_scale=self.softmax_scale,
                                        window_size=window_size, sinks=sinks)
        elif held == 0 or tail < 0:  # (tail < 0: the window hides the history)
            out = forward(q, k, v)
        elif tail:
            # A window that cuts the history for some of the chunk's tokens: the T history keys
            # the first token sees, read back from the planes, join the chunk in one forward
            # (T query rows of zeros in front, their outputs dropped), so that every token's
            # window is the forward's own mask. (Decode steps would take one per such token.)
            T = tail
            kt, vt = history_tail(self, b, T, held)
            pad = torch.zeros((T, self.n_heads, self.head_dim), dtype=q.dtype, device=q.device)
            out = forward(torch.cat([pad, q]), torch.cat([kt, k]), torch.cat([vt, v]))[T:]
        else:
            # The history first: nothing is written until both parts have run.
            hist, hist_lse = history_attention(self, b, q, before, held)
            own, own_lse = forward(q, k, v, return_lse=True)
            out = merge(hist, hist_lse, own, own_lse.transpose(0, 1))
        self._append(b, k, v, fn, held)
        return out

    # ---- reporting -------------------------------------------------------------------

    def stats(self) -> dict:
        """What the last decode step read: live_frac, refine_frac, v_refine_frac (fractions
        of (request, KV head, key) triples), bytes_per_key (cache bytes per key per KV
        head, screen and reference sample included), fixup_rows, keys, rows, and
        rejected_appends: requests whose step token a CUDA step did not append because no
        page was reserved for it or the request was full (only possible in a compiled or
        graphed step, which skips the host checks; eager steps raise instead)."""
        if self._stats_pending:
            self._last_stats = _stats_dict(self._stats_dev.tolist())
            self._stats_pending = False
        if self._last_stats is None:
            return {"live_frac": 0.0, "refine_frac": 0.0, "v_refine_frac": 0.0,
                    "bytes_per_key": 0.0, "fixup_rows": 0, "keys": 0, "rows": 0, "rejected_appends": 0}
        return dict(self._last_stats)

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def _cuda_buffers(self):
        """The decode workspace and the step counters (allocated once, reused every step, so
        a captured graph keeps valid pointers)."""
        return self._workspace, self._stats_dev

    def _step(self, q: torch.Tensor, k: torch.Tensor | None, v: torch.Tensor | None,
              window_before: int = 0, sinks: torch.Tensor | None = None):
        """One step through the fold_attention::decode_step op: q (batch, n_heads, D), k/v None
        or (batch, n_kv_heads, D), all contiguous; pages already reserved. The op is traced under
        torch.compile and dispatched when an input requires grad (autograd then refuses to
        backpropagate through it rather than cutting the graph silently); otherwise its
        implementation is called directly (the dispatch costs ~40 us of host time per step)."""
        if _needs_op(q, k, v):
            out, lse = decode_step_op(q, k, v, *self._step_buffers(), window_before, sinks,
                                      self._pinned)
        else:
            out, lse = decode_step_new(q, k, v, *self._step_buffers(), window_before, sinks,
                                       self._pinned, desc=self._c_desc())
        self._stats_pending = True
        return out, lse

    def _c_desc(self) -> FoldKVCacheDesc:
        """The C descriptor of the cache's buffers, built once: the buffers are allocated in
        the constructor and never replaced (their contents change; their addresses do not)."""
        if self._cdesc is None:
            self._cdesc = self._desc()
        return self._cdesc

    def _step_buffers(self) -> tuple:
        """The op's arguments after q, k_step, v_step: the cache's buffers and settings."""
        return (
            self.k_a, self.k_b, self.k_scale, self.v, self.v_a, self.v_b, self.v_exp,
            self.v_page_sum, self.heavy_keys, self.page_table, self.lengths, self._workspace,
            self._stats_dev, self.max_len, self._v_exp_fixed is not None, self.softmax_scale,
            self.depth, self.refine_band, self.refine_band + V_REFINE_EXTRA,
        )

    def __setstate__(self, state: dict) -> None:
        # A cache pickled before pools and pinned windows existed: neither.
        state.setdefault("_forgotten", [0] * state["batch"])
        state.setdefault("_pinned", 0)
        state.setdefault("window_size", None)
        state.setdefault("_shared", {})
        self.__dict__.update(state)

    def __getstate__(self) -> dict:
        # The C descriptor holds raw pointers into this cache's buffers: a copy (deepcopy,
        # pickle) builds its own from its own buffers.
        state = self.__dict__.copy()
        state["_cdesc"] = None
        return state

    def __repr__(self) -> str:
        return (
            f"FoldKVCache(batch={self.batch}, n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}, "
            f"head_dim={self.head_dim}, max_len={self.max_len}, depth={self.depth}, v8={self.v8}, "
            f"page_size={self.page_size}, dtype={self.dtype}, num_pages={self.num_pages}, "
            f"free_pages={self.free_pages}, window_size={self.window_size}, active={len(self.active)})"
        )


def _stats_dict(c) -> dict:
    keys = max(c[0], 1)
    return {
        "live_frac": c[1] / keys,
        "refine_frac": c[2] / keys,
        "v_refine_frac": c[3] / keys,
        "bytes_per_key": float(c[6]) / keys,
        "fixup_rows": int(c[5]),
        "keys": int(c[0]),
        "rows": int(c[4]),
        "rejected_appends": int(c[7]),
    }


def _step_rows(x, name: str, fn: str, cache: FoldKVCache, heads: int) -> tuple[torch.Tensor, bool]:
    """x as a contiguous (batch, heads, head_dim) tensor; whether it had the (B, 1, ...) form."""
    x = require_tensor(x, name, fn)
    if x.dtype != cache.dtype:
        raise TypeError(f"{fn}: {name} has dtype {x.dtype} but the cache holds {cache.dtype}")
    if x.device != cache.device:  # (on the cache's own device: accepted, as _require_cpu would)
        _require_cpu(x.device, name, fn, cache.device)
    shape = (cache.batch, heads, cache.head_dim)
    if x.dim() == 4 and x.shape[1] == 1:
        four = True
        x = x[:, 0]
    elif x.dim() == 3:
        four = False
    else:
        raise ValueError(
            f"{fn}: {name} must have shape {shape} or {(cache.batch, 1) + shape[1:]}, got {tuple(x.shape)}"
        )
    if tuple(x.shape) != shape:
        raise ValueError(
            f"{fn}: {name} must have shape {shape} or {(cache.batch, 1) + shape[1:]}, got "
            f"{tuple(x.shape) if not four else (x.shape[0], 1) + tuple(x.shape[1:])}"
        )
    return x.contiguous(), four


def _step_window(window_size, cache: FoldKVCache, fn: str) -> int:
    """FlashAttention's window_size=(left, right) for a decode step: the query (its request's
    newest position) sees its last left + 1 keys (-1: all); right is checked and has nothing to
    hide (no key lies after the query). The C ABI's window_before: 0 where the window hides no
    key a request of max_len tokens could hold, so that such a window runs the plain step."""
    before, _ = check_window_size(cache._call_window(window_size, fn), fn)
    return 0 if before >= cache.max_len else before


def _step_sinks(sinks, cache: FoldKVCache, fn: str):
    """None, or the sinks as a contiguous float32 (n_heads,) tensor on the cache's device (the
    C reference checks their values: finite or -inf)."""
    if sinks is None:
        return None
    sinks = require_tensor(sinks, "sinks", fn)
    if not sinks.is_floating_point():
        raise TypeError(f"{fn}: sinks must be a floating tensor, got {sinks.dtype}")
    if tuple(sinks.shape) != (cache.n_heads,):
        raise ValueError(f"{fn}: sinks must have shape ({cache.n_heads},) (one per query head), "
                         f"got {tuple(sinks.shape)}")
    if sinks.device != cache.device:
        raise ValueError(f"{fn}: sinks is on {sinks.device} but the cache is on {cache.device}")
    return sinks.detach().float().contiguous()


def _check_sink_values(sinks, fn: str) -> None:
    """The sinks, finite or -inf each (the CUDA step reads them on the device unchecked; the C
    reference checks a CPU step's, but only after the step has taken its pages): one device
    read, on eager steps only."""
    bad = ~(torch.isfinite(sinks) | (sinks == float("-inf")))
    if bool(bad.any()):
        h = int(bad.nonzero()[0, 0])
        raise ValueError(f"{fn}: sinks[{h}] must be finite or -inf, got {float(sinks[h])}")


def fold_attn_with_kvcache(q_step, cache, k_step=None, v_step=None, return_lse=False,
                           window_size=None, sinks=None):
    """Optionally append one token per active request to `cache`, then attend over it.

    Args:
        q_step: (batch, n_heads, head_dim) or (batch, 1, n_heads, head_dim), the cache's dtype;
            or (batch, n, n_heads, head_dim) with n > 1: n new tokens per request (a
            speculative draft: FoldKVCache.truncate then forgets the rejected ones; a longer
            chunk for one request: FoldKVCache.prefill_request), run as n steps, each appending
            token i of every active request and attending its query i, so that query i sees
            its request's cache up to itself (causal). k_step / v_step are then required.
        cache: a FoldKVCache.
        k_step, v_step: None, or the new token's keys/values (batch, n_kv_heads, head_dim)
            or (batch, 1, n_kv_heads, head_dim), or (batch, n, n_kv_heads, head_dim) with n
            tokens; rows of free slots are ignored.
        return_lse: also return the natural-log LSE, float32 (batch, n_heads), or (batch, n,
            n_heads) for n > 1 tokens.
        window_size: FlashAttention's (left, right): the query, its request's newest token,
            sees that request's last left + 1 keys (the appended one included); -1: all.
            right has nothing to hide in a decode step. A window hides no key's mass: keys
            before it are never read and carry none. None: the cache's window (FoldKVCache's
            window_size) or none; a cache pinned to a window takes only that one.
        sinks: None, or one logit per query head (n_heads,), gpt-oss's attention sinks: exp(sink)
            joins the row's denominator with no value (the LSE includes it).

    Returns the output in q_step's shape (zeros for free slots), and the LSE if asked
    (-inf for free or empty slots).

    Under torch.compile the step is one fold_attention::decode_step op (no graph break),
    and a CUDA cache's step can be captured in a CUDA graph (torch.cuda.graph): the checks
    that would read tensor values on the host (non-finite inputs, full requests) and page
    reservation are skipped in both cases, so reserve pages up front
    (add_request(length=...)) for the tokens a compiled or captured step appends (an append
    with no room is rejected on the device, counted in stats()["rejected_appends"]).
    """
    fn = "fold_attn_with_kvcache"
    if not isinstance(cache, FoldKVCache):
        raise TypeError(f"{fn}: cache must be a FoldKVCache, got {type(cache).__name__}")
    return_lse = require_flag(return_lse, "return_lse", fn)
    if isinstance(q_step, torch.Tensor) and q_step.dim() == 4 and q_step.shape[1] > 1:
        return _tokens(q_step, cache, k_step, v_step, return_lse, window_size, sinks, fn)
    window_before = _step_window(window_size, cache, fn)
    sinks = _step_sinks(sinks, cache, fn)
    q, four = _step_rows(q_step, "q_step", fn, cache, cache.n_heads)
    if (k_step is None) != (v_step is None):
        raise ValueError(f"{fn}: pass both k_step and v_step, or neither")
    k = v = None
    if k_step is not None:
        k, _ = _step_rows(k_step, "k_step", fn, cache, cache.n_kv_heads)
        v, _ = _step_rows(v_step, "v_step", fn, cache, cache.n_kv_heads)
    # (is_compiling first: dynamo cannot trace the capture query, and never has to.)
    host = not torch.compiler.is_compiling() and not stream_capturing(cache.device)
    if host:
        # Host checks with as few device reads as possible (each is a sync on CUDA). CUDA: one
        # kernel reads the lengths and tests q, k and v (in active rows) for inf / NaN, and the
        # host waits once (fold_decode_cuda_precheck; H200: the lengths read and the torch test
        # below took ~89 us of a 178 us batch-1 step). CPU, or FOLD_DECODE_PRECHECK=0 (A/B runs):
        # the lengths read, then one torch test over the inputs (the C++ reference tests q).
        precheck = cache.is_cuda and os.environ.get("FOLD_DECODE_PRECHECK", "1") != "0"
        if sinks is not None:  # (before any page is taken; the C reference would refuse it later)
            _check_sink_values(sinks, fn)
        if precheck:
            lengths, nonfinite = decode_precheck_cuda(q, k, v, *cache._step_buffers(), desc=cache._c_desc())
        else:
            lengths, nonfinite = cache.lengths.tolist(), 0
        active = [b for b, n in enumerate(lengths) if n >= 0]
        ka = va = None  # the active requests' rows of k / v, where a host-side test needs them
        if k is not None:
            for b in active:
                if lengths[b] >= cache.max_len:
                    raise ValueError(
                        f"{fn}: request {b} is full ({cache.max_len} tokens = max_len); k_step cannot be appended"
                    )
            if not precheck or cache.v_scale is not None:
                if len(active) == cache.batch:
                    ka, va = k, v
                else:
                    idx = torch.tensor(active, dtype=torch.long, device=k.device)
                    ka, va = k[idx], v[idx]
        if precheck:
            for bit, name in ((1, "q_step"), (2, "k_step"), (4, "v_step")):
                if nonfinite & bit:
                    raise ValueError(f"{fn}: {name} holds a non-finite value")
            if nonfinite & 8:  # a key large enough that its rotation might overflow: test exactly
                rows = k if len(active) == cache.batch else k[torch.tensor(active, dtype=torch.long, device=k.device)]
                cache._check_keys(rows, fn, "k_step")
        else:
            checks = [("q_step", q)]  # (on the CPU too: the reference would name it "q row")
            if k is not None:
                checks += [("k_step", ka), ("v_step", va)]
            # One finiteness test over all of them (one reduction, one read); the offender is
            # named on failure only.
            flat = torch.cat([x.reshape(-1) for _, x in checks]) if len(checks) > 1 else checks[0][1]
            if not bool(torch.isfinite(flat).all()):
                bad = next(name for name, x in checks if not bool(torch.isfinite(x).all()))
                raise ValueError(f"{fn}: {bad} holds a non-finite value")
            # The keys' rotation (the C reference tests it itself; with a v_scale,
            # _check_values below does).
            if ka is not None and cache.is_cuda and cache.v_scale is None:
                cache._check_keys(ka, fn, "k_step")
        opened = []  # (request, its reserved pages before the step)
        if k is not None:
            if cache.v_scale is not None:  # (V beyond the fixed scale: before any page is taken)
                cache._check_values(ka, va, fn, "k_step", "v_step")
            # Every page the step opens, counted before any is taken: a pool that cannot give
            # them all leaves the cache as it was.
            opening = [b for b in active if cache._new_pages(b, lengths[b] + 1)]
            cache._require_pages(len(opening), fn, f"appending a token to {len(opening)} requests")
            for b in opening:
                opened.append((b, cache._reserved[b]))
                cache._reserve(b, lengths[b] + 1, fn)
    try:
        out, lse = cache._step(q, k, v, window_before, sinks)
    except Exception:
        if host:  # a step the library refused appended nothing: its pages go back
            for b, have in reversed(opened):
                cache._unreserve(b, have)
        raise
    if host and cache._pinned:  # (a compiled or captured step keeps its pages: the next eager one
        for b in active:         # returns what they left)
            cache._forget_early_pages(b, lengths[b] + (k is not None))
    if four:
        out = out.unsqueeze(1)
    return (out, lse) if return_lse else out


def _tokens(q, cache: FoldKVCache, k, v, return_lse: bool, window_size, sinks, fn: str):
    """n > 1 new tokens per request (q (batch, n, H, D), k / v (batch, n, H_kv, D)): n steps, the
    i-th appending token i of every active request and attending its query i, so that each
    query sees its request's cache up to itself (a chunk after a request's history, or a
    speculative decoding draft). Every check the steps would make (lengths, values, pages) runs
    first over all n tokens, so a refused call changes nothing."""
    B, n, D = cache.batch, q.shape[1], cache.head_dim
    if k is None or v is None:
        raise ValueError(f"{fn}: queries of {n} tokens per request need k_step and v_step (their "
                         "keys and values, appended one token per step)")
    for name, x, heads in (("q_step", q, cache.n_heads), ("k_step", k, cache.n_kv_heads),
                           ("v_step", v, cache.n_kv_heads)):
        x = require_tensor(x, name, fn)
        if x.dtype != cache.dtype:
            raise TypeError(f"{fn}: {name} has dtype {x.dtype} but the cache holds {cache.dtype}")
        if x.device != cache.device:
            _require_cpu(x.device, name, fn, cache.device)
        if tuple(x.shape) != (B, n, heads, D):
            raise ValueError(f"{fn}: {name} must have shape {(B, n, heads, D)} (q_step holds {n} "
                             f"tokens per request), got {tuple(x.shape)}")
    _step_window(window_size, cache, fn)
    sinks_checked = _step_sinks(sinks, cache, fn)
    host = not torch.compiler.is_compiling() and not stream_capturing(cache.device)
    if host:
        lengths = cache.lengths.tolist()
        active = [b for b, x in enumerate(lengths) if x >= 0]
        for b in active:
            if lengths[b] + n > cache.max_len:
                raise ValueError(f"{fn}: request {b} holds {lengths[b]} tokens: {n} more exceed "
                                 f"max_len {cache.max_len}")
        # q whole, as each step tests it; its rotation where the C reference would refuse it
        # (a CPU cache: q x softmax_scale x log2 e, rotated in float32, must stay finite).
        if not bool(torch.isfinite(q).all()):
            raise ValueError(f"{fn}: q_step holds a non-finite value")
        if not cache.is_cuda and active:
            if not _query_rotation_finite(q[torch.tensor(active, dtype=torch.long, device=q.device)], cache.softmax_scale):
                raise ValueError(f"{fn}: q_step is too large: a row is not finite after scaling and "
                                 "rotation")
        if active:
            idx = torch.tensor(active, dtype=torch.long, device=q.device)
            ka, va = k[idx], v[idx]
            for name, x in (("k_step", ka), ("v_step", va)):
                if not bool(torch.isfinite(x).all()):
                    raise ValueError(f"{fn}: {name} holds a non-finite value")
            cache._check_values(ka.reshape(-1, cache.n_kv_heads, D), va.reshape(-1, cache.n_kv_heads, D),
                                fn, "k_step", "v_step")
        if sinks_checked is not None:
            _check_sink_values(sinks_checked, fn)
        cache._require_pages(cache._steps_pages(active, lengths, n), fn,
                             f"appending {n} tokens to {len(active)} requests")
    outs, lses = [], []
    for i in range(n):
        o, lse = fold_attn_with_kvcache(q[:, i], cache, k[:, i], v[:, i], return_lse=True,
                                        window_size=window_size, sinks=sinks)
        outs.append(o)
        lses.append(lse)
    out = torch.stack(outs, 1)
    return (out, torch.stack(lses, 1)) if return_lse else out


def _needs_op(*tensors) -> bool:
    """Whether a step must go through the registered op (traced under torch.compile, or an
    input requires grad) rather than call its implementation directly."""
    return torch.compiler.is_compiling() or (
        torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
    )


def decode_step_cuda(cache: FoldKVCache, q: torch.Tensor, k: torch.Tensor | None, v: torch.Tensor | None,
                     out: torch.Tensor, lse: torch.Tensor, window_size=None, sinks=None) -> None:
    """The graph-capturable core of fold_attn_with_kvcache for a CUDA cache: appends k/v
    (batch, n_kv_heads, head_dim; None: no append) to every active request and attends q
    (batch, n_heads, head_dim) into out / lse, with no checks and no host synchronisation.
    Pages for the appended tokens must already be reserved (add_request(length=...)) and
    every active request must have room: nothing is checked. When out / lse are contiguous
    tensors of the step's shapes and dtypes (q's, float32) on q's device, the kernels write them
    directly (no copy kernels in a captured step); otherwise the step's results are copied in.
    The tensors' metadata (shapes, dtypes, devices, layout) is checked, which reads nothing from
    the device: a q, k or v that does not match the cache would make the kernels read past its
    buffers. window_size and sinks as in fold_attn_with_kvcache (the sinks' values are not
    checked here: each must be finite or -inf)."""
    fn = "decode_step_cuda"
    if not isinstance(cache, FoldKVCache):
        raise TypeError(f"{fn}: cache must be a FoldKVCache, got {type(cache).__name__}")
    B, H, Hk, D = cache.batch, cache.n_heads, cache.n_kv_heads, cache.head_dim
    if (k is None) != (v is None):
        raise ValueError(f"{fn}: pass both k and v, or neither")
    for name, t, shape in (("q", q, (B, H, D)), ("k", k, (B, Hk, D)), ("v", v, (B, Hk, D))):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if tuple(t.shape) != shape:
            raise ValueError(f"{fn}: {name} must have shape {shape}, got {tuple(t.shape)}")
        if t.dtype != cache.dtype:
            raise TypeError(f"{fn}: {name} has dtype {t.dtype} but the cache holds {cache.dtype}")
        if t.device != cache.device:
            raise ValueError(f"{fn}: {name} is on {t.device} but the cache is on {cache.device}")
        if not t.is_contiguous():
            raise ValueError(f"{fn}: {name} must be contiguous")
    for name, t, shape in (("out", out, (B, H, D)), ("lse", lse, (B, H))):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if tuple(t.shape) != shape:
            raise ValueError(f"{fn}: {name} must have shape {shape}, got {tuple(t.shape)}")
    window_before = _step_window(window_size, cache, fn)
    sinks = _step_sinks(sinks, cache, fn)
    direct = (
        not _needs_op(q, k, v)
        and not out.requires_grad and not lse.requires_grad
        and out.is_contiguous() and lse.is_contiguous()  # (shapes checked above)
        and out.dtype == q.dtype and out.device == q.device
        and lse.dtype == torch.float32 and lse.device == q.device
    )
    if direct:
        decode_step_into(out, lse, q, k, v, *cache._step_buffers(), window_before, sinks,
                         desc=cache._c_desc())
        cache._stats_pending = True
        return
    o, s = cache._step(q, k, v, window_before, sinks)
    out.copy_(o)
    lse.copy_(s)
