"""The per-request state FoldKVCache.truncate rebuilds so that a request cut back to `length`
tokens holds the bits of one that only ever received those tokens (decode.h's writer rules):

- the heavy-key list: the HEAVY_KEYS keys with the largest K scale, ties to the older key, in
  that order. Keys past the cut may have pushed older ones out of it; only then is it rebuilt,
  from the scales of the kept keys.
- the V sum of the page the cut falls in: the writer sums a page's values in token order in
  float32, so it is summed again over the page's kept tokens, in that order (the stored bf16 /
  fp16 values are the values the writer summed).
"""

from __future__ import annotations

import torch


def heavy_list(k_scale: torch.Tensor, pages: list[int], length: int, slots: int) -> torch.Tensor:
    """(n_kv_heads, slots) int32: each head's list over keys [0, length) of a request whose
    logical pages are `pages` (pool indices). k_scale: the pool's (num_pages, Hk, page_size)."""
    Hk, S = k_scale.shape[1], k_scale.shape[2]
    out = torch.full((Hk, slots), -1, dtype=torch.int32, device=k_scale.device)
    if length == 0:
        return out
    n = -(-length // S)
    idx = torch.tensor(pages[:n], dtype=torch.long, device=k_scale.device)
    scales = k_scale.index_select(0, idx).transpose(0, 1).reshape(Hk, n * S)[:, :length].float()
    # Largest first, ties to the older key: a stable sort of the negated scales.
    order = torch.sort(-scales, dim=1, stable=True).indices[:, :slots]
    out[:, : order.shape[1]] = order.to(torch.int32)
    return out


def page_sum(v: torch.Tensor, page: int, rows: int) -> torch.Tensor:
    """(Hk, D) float32: the sum of rows [0, rows) of pool page `page` of v (num_pages, Hk,
    page_size, D), in row order, rounded to float32 at every add (the writer's order). Summed on
    the host: at most page_size - 1 adds of one (Hk, D) row each."""
    x = v[page, :, :rows].float().cpu()
    acc = x[:, 0].clone()
    for r in range(1, rows):
        acc += x[:, r]
    return acc.to(v.device)
