// Sliding-window masking (fold_attn_problem_t's window_before / window_after, FlashAttention's
// window_size), shared by the CPU reference and the CUDA entry points: which keys a query sees,
// and which blocks of keys (or of queries) can hold a visible pair, so that loops visit only
// those. Positions are a request's own (0 = its first token): a window never reaches across
// requests, and a request's result does not depend on the batch around it.
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "fold_attention/fold_attention.h"

namespace fold {

// Whether query i sees key j (both request-relative): causal, then the window's two sides.
FOLD_HD bool key_visible(const fold_attn_problem_t &p, int64_t i, int64_t j) {
  if (p.causal && j > i) return false;
  if (p.window_before > 0 && i - j >= p.window_before) return false;
  if (p.window_after > 0 && j - i >= p.window_after) return false;
  return true;
}

// The keys [*lo, *hi) of a request of `len` tokens that queries [q0, q1) (q0 < q1) may see.
FOLD_HD void visible_keys(const fold_attn_problem_t &p, int64_t q0, int64_t q1, int64_t len,
                          int64_t *lo, int64_t *hi) {
  int64_t a = p.window_before > 0 ? q0 - p.window_before + 1 : 0;
  int64_t b = p.causal ? q1 : (p.window_after > 0 ? q1 - 1 + p.window_after : len);
  *lo = a < 0 ? 0 : a;
  *hi = b > len ? len : b;
}

// The queries [*lo, *hi) of a request of `len` tokens that may see keys [k0, k1) (k0 < k1).
FOLD_HD void seeing_queries(const fold_attn_problem_t &p, int64_t k0, int64_t k1, int64_t len,
                            int64_t *lo, int64_t *hi) {
  int64_t a = p.causal ? k0 : (p.window_after > 0 ? k0 - p.window_after + 1 : 0);
  int64_t b = p.window_before > 0 ? k1 - 1 + p.window_before : len;
  *lo = a < 0 ? 0 : a;
  *hi = b > len ? len : b;
}

// Whether the window masks nothing (beyond causal masking) in requests of at most `longest`
// tokens: then the kernels that know only causal masking compute the same result.
FOLD_HD bool window_masks_nothing(const fold_attn_problem_t &p, int64_t longest) {
  const bool before = p.window_before <= 0 || p.window_before >= longest;
  const bool after = p.causal || p.window_after <= 0 || p.window_after >= longest;
  return before && after;
}

// Whether the call's window can hide a key (beyond causal masking) in a request of any length
// the library takes (below 2^31 tokens). The CUDA launchers run their windowed kernel instances
// exactly for such calls: a choice made from the arguments alone, never from the batch's
// lengths, so that a request takes the same code (and gives the same bits) alone or in any batch.
FOLD_HD bool window_may_mask(const fold_attn_problem_t &p) {
  return !window_masks_nothing(p, 0x7fffffff);
}

}  // namespace fold
