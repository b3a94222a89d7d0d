// Epilogue pieces for a warp's 16 rows of a wgmma accumulator: stage_warp_rows converts them to
// 16 bits into a shared tile with stmatrix, the staging step of an epilogue that leaves through
// shared memory (the backward's dK / dV, backward_sm90_epilogue.cuh); st_global_16_if is a
// predicated 16-byte store (the backward's copy-out, the forward's O after its quad transpose).
//
// The tile is any region of a kernel's shared memory laid out as a 128B-swizzled TMA load
// writes a [ROWS][D] tile: (D + 63) / 64 column blocks of ROWS 128-byte lines, 16-byte chunk j
// of line l at j ^ (l % 8). A warp only touches lines line0 .. line0 + 15 of it, so the warps of
// a warpgroup need no barrier among them, only __syncwarp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/hopper/stmatrix.cuh"
#include "cuda/tile_mma.cuh"

namespace fold::cuda {

// The warp's accumulator rows (an m64nD wgmma accumulator: lane 4 g + tq holds rows g and g + 8
// of the warp's 16, columns 8 j + 2 tq + e, in acc[4 j + 2 i + e]) into lines line0 .. line0 +
// 15 of the tile; line0 is a multiple of 8. stmatrix's fragment of an 8 x 8 matrix is exactly
// pack2 of such a column pair, so four matrices (rows +0 / +8, column blocks j, j + 1) go in one
// instruction: lane 8 x + rr gives the address of line rr of matrix x, whose 16-byte chunk
// (j & 7) ^ rr sits in column block j / 8 (j is even, so j and j + 1 share the column block).
template <int D, int ROWS, class Tag, class Conv>
__device__ __forceinline__ void stage_warp_rows(uint32_t tile_addr, int line0, int lane,
                                                const float (&acc)[D / 2], Conv conv) {
  const int x = lane >> 3, rr = lane & 7;
  const uint32_t line = tile_addr + static_cast<uint32_t>(line0 + 8 * (x & 1) + rr) * 128u;
  const int flip = (x >> 1) ^ rr;  // chunk of column block j0 + (x >> 1) = (j0 & 7) ^ flip
#pragma unroll
  for (int j0 = 0; j0 < D / 8; j0 += 2) {
    const uint32_t addr = line + (j0 >> 3) * (ROWS * 128) + (((j0 & 7) ^ flip) << 4);
    hopper::stmatrix_x4(addr, tile::pack2(conv(acc[4 * j0]), conv(acc[4 * j0 + 1]), Tag{}),
                        tile::pack2(conv(acc[4 * j0 + 2]), conv(acc[4 * j0 + 3]), Tag{}),
                        tile::pack2(conv(acc[4 * j0 + 4]), conv(acc[4 * j0 + 5]), Tag{}),
                        tile::pack2(conv(acc[4 * j0 + 6]), conv(acc[4 * j0 + 7]), Tag{}));
  }
}

// 16 bytes to global memory in one store where `pred` holds (a predicated store, no branch; a
// plain uint4 store came out as four 4-byte stores at D 64 / 128: the compiler split the vector
// that the shared load's asm returns).
__device__ __forceinline__ void st_global_16_if(bool pred, void *ptr, uint4 v) {
  asm volatile(
      "{\n"
      "  .reg .pred p;\n"
      "  setp.ne.b32 p, %0, 0;\n"
      "  @p st.global.v4.b32 [%1], {%2, %3, %4, %5};\n"
      "}\n" ::"r"(static_cast<int>(pred)),
      "l"(ptr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
      : "memory");
}

}  // namespace fold::cuda
