// The dK / dV epilogue of the sm_90a backward main kernels (backward_sm90.cu and
// backward_sm90_ws.cuh), through shared memory: each warp writes its 16 key rows of a wgmma
// accumulator, converted to 16 bits, into a shared tile with stmatrix, then copies the rows to
// global memory with 16-byte stores, a row's D / 8 pieces on consecutive lanes: a store
// instruction writes 32 consecutive pieces of the warp's rows (two whole rows at D 128), so
// whole 32-byte sectors where rows start 32-byte aligned, where the accumulator's own layout
// gives 4-byte stores that touch 8 rows and half of each sector.
// The values and their packing are the caller's (`conv`, then pack2 of column pairs, as the
// 4-byte stores did): the same bits land at the same addresses.
//
// The staging (stage_warp_rows) is stage_rows.cuh's; its tile is any region of the kernel's
// shared memory laid out as load_tile_sw writes a [ROWS][D] tile (the kernels use the K / V
// tiles, whose rows of the warp are free by then; each kernel says why).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/grid_scale.h"
#include "core/problem.h"
#include "cuda/stage_rows.cuh"
#include "cuda/tile_mma.cuh"

namespace fold::cuda::bwd {

// 16 bytes of shared memory (volatile and a memory clobber: stays after the __syncwarp that
// orders it behind the other lanes' stmatrix).
__device__ __forceinline__ uint4 ld_shared_16(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

using cuda::st_global_16_if;
using cuda::stage_warp_rows;

// dK's rows (stage_warp_rows): the accumulator times 2^-t and the softmax scale where the group's
// grid scale is valid, NaN elsewhere. `valid` is uniform: one branch, not a select per element.
template <int D, int ROWS, class Tag>
__device__ __forceinline__ void stage_dk_rows(uint32_t tile_addr, int line0, int lane,
                                              const float (&acc)[D / 2], bool valid,
                                              float dk_unscale, float softmax_scale) {
  if (valid)
    stage_warp_rows<D, ROWS, Tag>(tile_addr, line0, lane, acc, [&](float a) {
      return mul_rn(mul_rn(a, dk_unscale), softmax_scale);
    });
  else
    stage_warp_rows<D, ROWS, Tag>(tile_addr, line0, lane, acc,
                                  [](float) { return __int_as_float(0x7fffffff); });
}

// Lines line0 .. line0 + n_rows - 1 of the tile (written by this warp's stage_warp_rows and a
// __syncwarp since) to global memory: row i (D 16-bit elements) at rows + i * row_stride, 16-byte
// aligned. Rows n_rows .. 15 are not written (keys past the request's end: the next request's
// rows in a packed batch). Piece idx = 32 it + lane is chunk idx % (D / 8) of row
// idx / (D / 8): 16 D / 8 / 32 = D / 16 stores per lane.
template <int D, int ROWS, class T>
__device__ __forceinline__ void store_warp_rows(uint32_t tile_addr, int line0, int lane, int n_rows,
                                                T *rows, int64_t row_stride) {
  constexpr int kChunks = D / 8;
  static_assert(16 * kChunks % 32 == 0, "whole stores");
  constexpr int kIters = 16 * kChunks / 32;
  // All loads first (the tile's 16 lines are this warp's, so lines past n_rows are read
  // harmlessly), then the stores: the loads' latencies overlap instead of each store waiting
  // for its own.
  uint4 piece[kIters];
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int idx = 32 * it + lane;
    const int row = idx / kChunks, ch = idx % kChunks;
    piece[it] =
        ld_shared_16(tile_addr + (ch >> 3) * (ROWS * 128) +
                     static_cast<uint32_t>(line0 + row) * 128u + (((ch & 7) ^ (row & 7)) << 4));
  }
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int idx = 32 * it + lane;
    const int row = idx / kChunks, ch = idx % kChunks;
    st_global_16_if(row < n_rows, rows + row * row_stride + 8 * ch, piece[it]);
  }
}

}  // namespace fold::cuda::bwd
