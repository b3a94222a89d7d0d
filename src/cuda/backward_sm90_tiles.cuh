// Shared-memory tile helpers of the sm_90a backward main kernels (backward_sm90.cu and the
// warp-specialised backward_sm90_ws.cu): the swizzled K / V tile loads, the 4-byte lse /
// Delta copies and the dQ staging tile's index.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/problem.h"
#include "cuda/tile_mma.cuh"

namespace fold::cuda::bwd {

// 0 for a broadcast view's head / batch TMA coordinate (tensor_map.h), else 1.
struct QdoMuls {
  int32_t q_head, q_batch, do_head, do_batch;
};

// Word index of (row, col) in a dQ staging tile of BM rows: D / 32 column blocks [BM][32
// int32 = 128 B], 128-byte swizzled (the layout of a TMA box {32, 1, rows} with
// SWIZZLE_128B): 16-byte chunk c of row r at c ^ (r % 8).
template <int BM>
__device__ __forceinline__ int stage_index(int row, int col) {
  const int chunk = ((col & 31) >> 2) ^ (row & 7);
  return (col >> 5) * (BM * 32) + row * 32 + chunk * 4 + (col & 3);
}

// 4-byte cp.async with zero fill (lse, Delta rows).
__device__ __forceinline__ void cp_async4(uint32_t dst, const void *src, bool valid) {
  const int bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}

// The mbarrier at `bar` (shared address) counts one arrival once every cp.async this thread
// has issued so far has landed (.noinc: the arrival is one of the barrier's expected count).
__device__ __forceinline__ void cp_async_mbar_arrive_noinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// Rows [row0, row0 + ROWS) of head `head` of request b into a swizzled [blocks][ROWS][64]
// tile at `base` (zeros past the request's end), by NT threads; `t` is this thread's index
// among them (unsigned: the divisions by powers of two stay shifts).
template <int ROWS, int D, int NT>
__device__ __forceinline__ void load_tile_sw(uint32_t base, const fold_attn_problem_t &p,
                                             const fold_tensor_t &tensor, int b, const Request &r,
                                             int64_t row0, int head, unsigned t) {
  constexpr int kChunks = D / 8;
  const char *data = static_cast<const char *>(tensor.data);
  if constexpr (NT % kChunks == 0 && (NT / kChunks) % 8 == 0 && ROWS % (NT / kChunks) == 0) {
    // Every thread keeps one chunk column c and takes rows row_t + kStep * it: the source
    // advances by kStep tokens, the destination by kStep rows (the swizzle phase row % 8 is
    // the same for all of them), so the address arithmetic is done once.
    constexpr int kStep = NT / kChunks;
    const int c = t % kChunks, row_t = t / kChunks;
    const uint32_t dst = base + static_cast<uint32_t>((c >> 3) * (ROWS * 128) + row_t * 128 +
                                                      (((c & 7) ^ (row_t & 7)) << 4));
    const int64_t src = element_offset(p, tensor, b, r, row0 + row_t, head) + c * 8;  // elements
#pragma unroll
    for (int it = 0; it < ROWS / kStep; ++it) {
      const bool valid = row0 + row_t + it * kStep < r.len;
      const char *ptr = valid ? data + (src + it * kStep * tensor.token_stride) * 2 : data;
      tile::cp_async16(dst + it * kStep * 128, ptr, valid);
    }
  } else {
    for (int idx = t; idx < ROWS * kChunks; idx += NT) {
      const int row = idx / kChunks;
      const int c = idx % kChunks;
      const bool valid = row0 + row < r.len;
      const char *src =
          valid ? data + (element_offset(p, tensor, b, r, row0 + row, head) + c * 8) * 2 : data;
      const uint32_t dst = base + static_cast<uint32_t>((c >> 3) * (ROWS * 128) + row * 128 +
                                                        (((c & 7) ^ (row & 7)) << 4));
      tile::cp_async16(dst, src, valid);
    }
  }
}

}  // namespace fold::cuda::bwd
