// Sliding windows (core/window.h) in the backward main kernels (backward.cu, backward_sm90.cu,
// backward_sm90_ws.cuh): which query blocks a key block visits, and which pairs of a (query
// block, key block) tile are visible, as one band of diagonals of the tile.
//
// The kernels are compiled twice, without and with the window (a template flag): the instances
// without it keep their code as it was (causal masking only), and a call takes the windowed ones
// exactly when its window can mask a pair that causal masking keeps, in a request of any length
// (window_may_mask, core/window.h). That is a property of the call alone, never of seqlen (the
// batch's longest request): a request runs the same instance, with the same masking decisions,
// alone and in any batch. For a request the window does not reach across (w >= its length), the
// windowed instances visit the same query blocks and mask the same pairs as the plain ones.
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "core/window.h"
#include "fold_attention/fold_attention.h"

namespace fold::cuda::bwd {

// The query blocks [*q_begin, *q_end) the key block [k0, k0 + bn) of a request of `len` tokens
// visits: from the first query that may see one of its keys (seeing_queries), rounded down to a
// multiple of BM (blocks start at the request's first token), to the last such query. This is
// the CPU reference's range (cpu/backward.cpp), so the GPU rounds the same (query block, key
// block) dQ partials and adds them to the same grid rows (the block's keys end at the request's
// end, as the reference's). The range is never empty: every key's own query sees it, so
// q_begin <= k0 < q_end.
// q_end <= len is an int32, as Request::len (the kernels' loops without a window compare with
// that int32: the same type keeps their code unchanged).
template <int BM>
FOLD_HD void window_query_blocks(const fold_attn_problem_t &p, int64_t k0, int bn, int32_t len,
                                 int64_t *q_begin, int32_t *q_end) {
  const int64_t k1 = k0 + bn < len ? k0 + bn : len;
  int64_t lo = 0, hi = 0;
  seeing_queries(p, k0, k1, len, &lo, &hi);
  *q_begin = lo / BM * BM;
  *q_end = static_cast<int32_t>(hi);
}

// The visible pairs of a tile whose rows start at query q0 and whose keys start at key k0
// (request-relative): row r and key c (tile-relative) are visible, by causal masking and both
// sides of the window, iff lo <= c - r <= hi. With diag = q0 - k0, key j = k0 + c and query
// i = q0 + r: causal (j <= i) is c - r <= diag; window_after (j - i < wa) is c - r <= diag + wa
// - 1; window_before (i - j < wb) is c - r >= diag - wb + 1. The bounds are clamped to
// +-kFar, far beyond any tile's c - r (tiles have at most 256 rows or keys), so they fit an int
// whatever the window and the positions; the clamp changes no decision. Keys and rows past the
// request's end are the kernels' own test (their key / row limits), as without a window.
struct DiagBand {
  static constexpr int kFar = 1 << 20;
  int lo, hi;

  FOLD_HD bool holds(int d) const { return d >= lo && d <= hi; }
  // Whether rows [r0, r1] x keys [c0, c1] (inclusive, tile-relative) hold a masked pair.
  FOLD_HD bool cuts(int r0, int r1, int c0, int c1) const { return c1 - r0 > hi || c0 - r1 < lo; }
  // Whether they hold no visible pair (implies cuts).
  FOLD_HD bool excludes(int r0, int r1, int c0, int c1) const {
    return c0 - r1 > hi || c1 - r0 < lo;
  }
};

FOLD_HD DiagBand diag_band(const fold_attn_problem_t &p, int64_t q0, int64_t k0) {
  constexpr int64_t kFar = DiagBand::kFar;
  const int64_t diag = q0 - k0;
  int64_t lo = -kFar, hi = kFar;
  if (p.causal) hi = diag;
  if (p.window_after > 0 && diag + p.window_after - 1 < hi) hi = diag + p.window_after - 1;
  if (p.window_before > 0) lo = diag - p.window_before + 1;
  lo = lo < -kFar ? -kFar : (lo > kFar ? kFar : lo);
  hi = hi < -kFar ? -kFar : (hi > kFar ? kFar : hi);
  return DiagBand{static_cast<int>(lo), static_cast<int>(hi)};
}

}  // namespace fold::cuda::bwd
