"""A chunk of new tokens after a request's history (FoldKVCache.prefill_request on a request that
already holds tokens: a conversation's next turn, or a prompt's suffix after fork()).

Token t of an n-token chunk sits at position L + t (L: the tokens the request holds). Its causal
attention over the L + t + 1 keys it sees splits into two parts that share nothing:
- the history: the request's L cached keys, read from the cache's planes by dense decode steps
  that append nothing (`history_attention`);
- the chunk itself: keys L .. L + t, causal, by the training forward over the chunk's own
  bf16 / fp16 keys (the caller's fold_attn_func, a dense batch of one, which also takes the
  sinks).
`merge` joins them through their LSEs (float32), the way split-KV partials join.

Why decode steps read the history: the cache holds K only as rotated int8 planes, which the
decode kernels read directly, and a step's queries of one KV head form one group of rows. The
chunk's queries ride in that group: head h = kv G + g of token t becomes row (t G + g) of kv's
group of up to m G rows, m = 64 // G tokens (the kernels take groups of up to 64 rows), so a
group reads the history once for m tokens. The groups of one call are copies of the request: a
batch of P views of its per-request arrays (its lengths, page-table row, heavy keys and v8
exponents P times; the page pool shared), so one call reads the history P times in parallel for
P m tokens (one call, not P: each call costs ~100 µs of host time) and the other slots cost
nothing.

Sliding windows: token t sees history keys j >= L + t - left, i.e. the last left - t of them (C
ABI window_before = left - t). Tokens whose window covers the whole history share one call
without a window; the others take one call each (their windows differ); a token whose window
starts inside the chunk sees no history (its LSE is -inf there and the merge takes the chunk part
alone).
"""

from __future__ import annotations

import ctypes

import torch

from . import _lib
from ._decode_lib import V_EXP_UNSET, V_REFINE_EXTRA, library
from ._decode_op import cache_desc, decode_step_new
from ._hadamard import hadamard_unnormalised

_MAX_GROUP_ROWS = 64
_WORKSPACE_BUDGET = 256 << 20  # bytes of decode workspace one history call may take (CUDA)
_MAX_COPIES = 65535  # the most copies a call takes (the CUDA decode's most requests per call)


def _token_windows(n: int, L: int, before: int, pinned: int) -> list[int | None]:
    """window_before of each chunk token's history step: 0 (every history key), w in [1, L)
    (the last w keys), or None (no history key visible). before: the call's C ABI window
    (left + 1; 0: none). A cache pinned to a window takes a window on every step (the C ABI
    refuses 0 there, as its early pages may be gone), so its full-history tokens pass L."""
    out: list[int | None] = []
    for t in range(n):
        if before == 0:
            out.append(0)
            continue
        w = before - 1 - t  # keys j >= L + t - left: the history's last left - t
        if w <= 0:
            out.append(None)
        elif w >= L:
            out.append(L if pinned else 0)
        else:
            out.append(w)
    return out


def _runs(windows: list[int | None], m: int) -> list[tuple[int, int, int, int]]:
    """(t0, t1, window_before, k) runs of consecutive tokens with one window, each read by one
    decode call (or several, history_attention's workspace budget): P = ceil((t1 - t0) / k)
    requests of k <= m tokens (the last padded with tokens of zero queries), k = ceil((t1 - t0) /
    ceil((t1 - t0) / m)) so that fewer than P tokens are padding. Tokens that see no history
    are left out."""
    runs = []
    t = 0
    while t < len(windows):
        w = windows[t]
        if w is None:
            t += 1
            continue
        t1 = t + 1
        while t1 < len(windows) and windows[t1] == w:
            t1 += 1
        n = t1 - t
        runs.append((t, t1, w, -(-n // -(-n // m))))
        t = t1
    return runs


TAIL_KEYS_MAX = 2048  # the windowed route's most history keys (its forward pads as many rows)


def windowed_tail(cache, L: int, n: int, before: int) -> int:
    """0, or T: the history keys the windowed route reads back (prefill_request). Taken where a
    window (before = left + 1 > 0) cuts the history for some chunk token (token n - 1 sees
    fewer than all L) and the first token's T = min(L, left) keys are few: at most
    max(TAIL_KEYS_MAX, n), so the forward's padded rows cost at most about what the chunk's
    own do, or a bounded amount. (-1 where the window hides the whole history: nothing to read,
    the chunk alone.)"""
    if before == 0 or before - n >= L:  # every token sees the whole history
        return 0
    T = min(L, before - 1)
    if T == 0:
        return -1
    return T if T <= max(TAIL_KEYS_MAX, n) else 0


def history_attention(cache, b: int, q: torch.Tensor, before: int,
                      L: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunk queries q (n, n_heads, D) of request b (which holds L > 0 tokens; read from the
    cache if not given) against its cached keys, dense. before: the C ABI window (left + 1; 0:
    none). Returns out (n, n_heads, D) in q's dtype (zeros where no history key is visible) and
    the natural-log LSE (n, n_heads) float32 (-inf there). Changes nothing in the cache.

    Each run of tokens with one window is one decode call (or several, where the copies'
    workspace would pass _WORKSPACE_BUDGET): P copies of request b's per-request rows (a batch-P
    view whose page-table rows all name b's pages), k tokens per copy. The calls read the pages
    only (nothing is appended), and a step's request depends on its own rows alone, so the
    copies give the bits the same groups would give one step at a time, in calls of any size.
    The outputs are contiguous."""
    n, H, D = q.shape
    Hk = cache.n_kv_heads
    G = H // Hk
    if L is None:
        L = int(cache.lengths[b])
    runs = _runs(_token_windows(n, L, before, cache._pinned), max(1, _MAX_GROUP_ROWS // G))

    def blank():  # (zeros / -inf: what a token that sees no history key gets)
        return (torch.zeros((n, H, D), dtype=q.dtype, device=q.device),
                torch.full((n, H), float("-inf"), dtype=torch.float32, device=q.device))

    out = lse = None  # made by the first call that does not cover every token
    pool = (cache.k_a, cache.k_b, cache.k_scale, cache.v, cache.v_a, cache.v_b)
    per_request = (cache.v_exp, cache.v_page_sum, cache.heavy_keys, cache.page_table, cache.lengths)
    stats = torch.zeros(cache._stats_dev.numel(), dtype=torch.int64, device=cache.device)
    copies: dict[int, tuple] = {}  # P -> request b's per-request rows, P times
    workspaces: dict[int, torch.Tensor] = {}  # rows -> the largest workspace taken so far

    def view_of(P):
        # Request b's rows of the per-request arrays, P times (v_page_sum belongs to the pool).
        if P not in copies:
            copies[P] = tuple(x if x is cache.v_page_sum else x[b:b + 1] if P == 1
                              else x[b:b + 1].expand(P, *x.shape[1:]).contiguous() for x in per_request)
        view = (*pool, *copies[P])
        return view, cache_desc(cache.dtype, P, D, *view, cache.max_len,
                                cache._v_exp_fixed is not None, cache._pinned)

    def workspace_bytes(desc, rows):
        size = int(library().fold_decode_cuda_workspace_size(ctypes.byref(desc), rows))
        if size == 0:
            raise ValueError(f"FoldKVCache.prefill_request: {_lib.last_error()}")
        return max(size, 256)

    for t0, t1, w, k in runs:
        rows = k * H  # one group of k G rows per KV head
        # The workspace grows with the copies (each holds its groups' partials over max_len's
        # splits): at most _WORKSPACE_BUDGET bytes a call, so a long chunk takes several calls.
        p_max = min(-(-(t1 - t0) // k), _MAX_COPIES)
        if cache.is_cuda and p_max > 1:
            p_max = max(1, min(p_max, _WORKSPACE_BUDGET // workspace_bytes(view_of(1)[1], rows)))
        for c0 in range(t0, t1, p_max * k):
            c1 = min(t1, c0 + p_max * k)
            P = -(-(c1 - c0) // k)
            view, desc = view_of(P)
            if cache.is_cuda:
                need = workspace_bytes(desc, rows)
                if rows not in workspaces or workspaces[rows].numel() < need:
                    workspaces[rows] = torch.empty(need, dtype=torch.uint8, device=q.device)
                workspace = workspaces[rows]
            else:
                workspace = torch.empty(0, dtype=torch.uint8, device=q.device)
            x = q[c0:c1]
            if P * k > c1 - c0:
                x = torch.cat([x, x.new_zeros((P * k - (c1 - c0), H, D))])
            # (P k, Hk, G, D) -> (P, Hk, k, G, D): kv's group of copy p holds token p k + t's G
            # heads at rows t G .. t G + G - 1.
            qg = x.reshape(P, k, Hk, G, D).transpose(1, 2).reshape(P, rows, D).contiguous()
            o, s = decode_step_new(qg, None, None, *view, workspace, stats, cache.max_len,
                                   cache._v_exp_fixed is not None, cache.softmax_scale, None,
                                   cache.refine_band, cache.refine_band + V_REFINE_EXTRA, w, None,
                                   cache._pinned, desc=desc)
            o = o.reshape(P, Hk, k, G, D).transpose(1, 2).reshape(P * k, H, D)[:c1 - c0]
            s = s.reshape(P, Hk, k, G).transpose(1, 2).reshape(P * k, H)[:c1 - c0]
            if c1 - c0 == n:  # one call covers every token (so it is the only one)
                return o.contiguous(), s.contiguous()
            if out is None:
                out, lse = blank()
            out[c0:c1] = o
            lse[c0:c1] = s
    return (out, lse) if out is not None else blank()


def history_tail(cache, b: int, T: int, L: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Request b's last T cached keys and values, (T, n_kv_heads, D) in the cache's dtype, read
    back from the planes: K = H y / D with y = scale (A + B / 256) the stored rotated row (the
    unnormalised Hadamard H is its own inverse up to D), within scale / 512 of the written
    key, so bf16 keys come back as they were to well within their rounding; V as stored (bf16 /
    fp16), or a v8 pair e (a + b / 8). For the windowed chunk path: the keys a sliding window
    lets the chunk's tokens see."""
    if L is None:  # (a device read: a caller that knows L passes it)
        L = int(cache.lengths[b])
    P, D = cache.page_size, cache.head_dim
    dev = cache.k_a.device
    j = torch.arange(L - T, L, device=dev)
    pages = cache.page_table[b].to(dev).long()[j // P]
    rows = j % P
    a = cache.k_a[pages, :, rows].float()  # (T, Hk, D)
    bb = cache.k_b[pages, :, rows].float()
    scale = cache.k_scale[pages, :, rows].float().unsqueeze(-1)
    # Divided by D (a power of two) first: the butterflies' sums then stay within max |k|, where
    # D |k| could overflow float32 for bf16 keys the writer took (its rotation was finite).
    y = hadamard_unnormalised((a + bb / 256.0) * scale / D)
    # (The read-back can land a few units past the dtype's largest value, e.g. fp16 keys at
    # +-65504: clamped, as the keys written were finite.)
    top = torch.finfo(cache.dtype).max
    k = y.clamp(-top, top).to(cache.dtype)
    if cache.v is not None:
        v = cache.v[pages, :, rows]
    else:
        e4 = torch.float8_e4m3fn
        x = cache.v_exp[b].to(dev).float()
        x = torch.where(x == V_EXP_UNSET, torch.zeros_like(x), x)
        u = cache.v_a[pages, :, rows].view(e4).float() + cache.v_b[pages, :, rows].view(e4).float() / 8.0
        v = (u * torch.exp2(x).view(1, -1, 1)).clamp(-top, top).to(cache.dtype)
    return k.contiguous(), v.contiguous()


def merge(out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor) -> torch.Tensor:
    """Two attention partials over disjoint key sets, (n, H, D) outputs and their (n, H) natural-
    log LSEs, joined in float32: each weighted by its share of the total mass, a's share
    e^a / (e^a + e^b) = sigmoid(a - b). An LSE of -inf (no key) weighs 0; part b must hold a key
    for every row (the chunk's token sees itself), so a - b is never NaN. (Seven ops: each costs
    several µs of host time on a GPU.)"""
    share = torch.sigmoid(lse_a - lse_b).unsqueeze(-1)
    return torch.lerp(out_b.float(), out_a.float(), share).to(out_b.dtype)
