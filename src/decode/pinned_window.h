// A cache pinned to one sliding window (fold_kvcache_t::pinned_window = w > 0) forgets each
// request's keys before kept(L), the first token of the page that holds key L - w: no later
// step reads them (a windowed step at length L' >= L starts at key L' - w, in that page or a
// later one, and its first 64-key chunk never starts before its page), so the writers keep no
// state that would read them (the heavy-key list, a v8 re-scale) and the caller may release
// their pages.
#pragma once

#include <cstdint>

#include "core/host_device.h"

#if defined(__CUDA_ARCH__)
#define FOLD_PINNED_UNROLL _Pragma("unroll")
#else
#define FOLD_PINNED_UNROLL
#endif

namespace fold::decode {

// kept(L) for a request of L keys under pinned window w (0: not pinned, kept = 0).
FOLD_HD int32_t pinned_kept(int32_t L, int32_t w, int32_t page_size) {
  if (w <= 0 || L <= w) return 0;
  return (L - w) / page_size * page_size;
}

// Removes the heavy-list entries in [0, first) (keys the cache forgets), moving the rest up in
// order and filling the end with -1. sc (the entries' scales, kept beside idx) may be null.
// Other entries (-1 or beyond the request: only a hand-made cache has the latter) stay. Each
// forgotten entry sinks past the kept ones after it by adjacent swaps (a stable partition with
// static indices only, so that a kernel keeps the list in registers).
template <int N>
FOLD_HD void heavy_forget_before(int32_t *idx, uint16_t *sc, int32_t first) {
  bool gone[N];
  FOLD_PINNED_UNROLL
  for (int e = 0; e < N; ++e) gone[e] = idx[e] >= 0 && idx[e] < first;
  FOLD_PINNED_UNROLL
  for (int pass = 1; pass < N; ++pass) {
    FOLD_PINNED_UNROLL
    for (int e = 0; e + 1 < N; ++e) {
      if (!gone[e] || gone[e + 1]) continue;
      const int32_t i = idx[e];
      idx[e] = idx[e + 1];
      idx[e + 1] = i;
      if (sc != nullptr) {
        const uint16_t s = sc[e];
        sc[e] = sc[e + 1];
        sc[e + 1] = s;
      }
      gone[e] = false;
      gone[e + 1] = true;
    }
  }
  FOLD_PINNED_UNROLL
  for (int e = 0; e < N; ++e)
    if (gone[e]) {
      idx[e] = -1;
      if (sc != nullptr) sc[e] = 0;
    }
}

}  // namespace fold::decode
