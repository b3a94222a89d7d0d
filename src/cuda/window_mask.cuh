#pragma once
// The sliding window (core/window.h's rule) in the terms the forward kernels mask a key block
// by: per warp of 16 consecutive query rows, two bounds taken once per tile, then three
// comparisons per score.
//
// Row q_row + rr of a warp (rr in [0, 16), request-relative q_row) sees key j iff
//   first + rr <= j <= last + rr  and  j < len,
// which is key_visible's rule (causal, window_before, window_after) for every row: first and
// last are clamped so that no sum below overflows, and the clamps only ever replace a bound
// that no key of the request can reach by another that none can reach either. Rows past the
// request's end (computed, never stored) follow the same rule; they may see no key at all.

#include <cstdint>

#include "core/window.h"
#include "fold_attention/fold_attention.h"

namespace fold::cuda {

struct RowsWindow {
  int first;  // first key row rr = 0 may see (>= -16: lower bounds exclude no key)
  int last;   // last key row rr = 0 may see (<= kNoLast: higher bounds exclude no key)

  // Above every key index (the host keeps token counts below 2^31 - 256) with room for + 15.
  static constexpr int kNoLast = 0x7fffffff - 16;
};

__device__ __forceinline__ RowsWindow rows_window(const fold_attn_problem_t &p, int q_row) {
  // q_row < len + 192 and window_before - 1 < 2^31: the difference fits in an int.
  const int first = p.window_before > 0 ? q_row - (p.window_before - 1) : -16;
  int64_t last = RowsWindow::kNoLast;
  if (p.causal)
    last = q_row;  // (window_after >= 1 cannot cut below the diagonal)
  else if (p.window_after > 0)
    last = static_cast<int64_t>(q_row) + (p.window_after - 1);
  return RowsWindow{first < -16 ? -16 : first,
                    static_cast<int>(last < RowsWindow::kNoLast ? last : RowsWindow::kNoLast)};
}

// One key block (first key k0, request-relative) seen by one warp: key kk of the block
// (0 <= kk < kBn) is visible to the warp's row rr iff lo + rr <= kk <= hi + rr and kk < limit.
template <int kBn>
struct BlockMask {
  int lo, hi, limit;

  __device__ __forceinline__ BlockMask(const RowsWindow &w, int k0, int len)
      : lo(w.first - k0), hi(w.last - k0), limit(len - k0) {}

  // Whether any key of the block is hidden from any of the warp's 16 rows: the left bound hides
  // the most from row 15 (lo + 15 > 0: it does not see key 0), the right one from row 0
  // (hi < kBn - 1: it does not see the block's last key).
  __device__ __forceinline__ bool any() const { return limit < kBn || hi < kBn - 1 || lo + 15 > 0; }
  // Whether every key of the block is hidden from every one of the warp's rows: row 15 sees none
  // up to its last, or row 0 none from its first on (a split, the first rows hiding every key by
  // one bound and the others by the other, would need hi < lo).
  __device__ __forceinline__ bool all() const {
    return limit <= 0 || hi + 15 < 0 || lo >= (limit < kBn ? limit : kBn);
  }
  __device__ __forceinline__ bool masked(int rr, int kk) const {
    return kk >= limit || kk > hi + rr || kk < lo + rr;
  }
};

// Whether the window hides any key that causal masking and the request's end alone do not
// from a real row of queries [q0, q1) of a request of len tokens (q0 < q1 <= len). When it
// does not, the tile's key blocks are the unwindowed ones ([0, k_end): visible_keys agrees)
// and the kernels run their window-free forms on it (the instruction sequence of a call
// without a window). Depends on the request's own length alone.
__device__ __forceinline__ bool window_cuts(const fold_attn_problem_t &p, int q0, int q1, int len) {
  // The last row loses key 0; or (causal hides every key after the row already) the first
  // row loses the request's last key.
  return (p.window_before > 0 && q1 - 1 >= p.window_before) ||
         (!p.causal && p.window_after > 0 && len - 1 - q0 >= p.window_after);
}

// The key blocks of kBn keys (aligned to the request's start) that queries [q0, q1) of a request
// of len tokens (q0 < q1 <= len) may see: blocks *first .. *first + *count - 1. visible_keys's
// range (core/window.h, as the CPU reference takes it), its first key rounded down to a block
// start, in 32-bit arithmetic (the kernels' positions are ints; no sum below overflows).
template <int kBn>
__device__ __forceinline__ void visible_key_blocks(const fold_attn_problem_t &p, int q0, int q1,
                                                   int len, int *first, int *count) {
  const int lo =
      p.window_before > 0 && q0 - (p.window_before - 1) > 0 ? q0 - (p.window_before - 1) : 0;
  // min(len, q1 - 1 + window_after), written so that it cannot overflow.
  const int hi =
      p.causal ? q1
               : (p.window_after > 0 && p.window_after <= len - (q1 - 1) ? q1 - 1 + p.window_after
                                                                         : len);
  *first = lo / kBn;
  *count = (hi + kBn - 1) / kBn - *first;
}

}  // namespace fold::cuda
