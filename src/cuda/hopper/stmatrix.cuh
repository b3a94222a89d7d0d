// stmatrix (sm_90): a warp stores four 8x8 matrices of 16-bit elements to shared memory in
// one instruction. Register x of every thread holds its fragment of matrix x: thread t owns
// row t / 4, columns 2 (t % 4) and 2 (t % 4) + 1 (the layout of an mma / wgmma accumulator
// pair packed to 16 bits). Lane 8 x + r gives the shared address of row r of matrix x (16
// contiguous, 16-byte aligned bytes), so any row placement (a swizzle) is free.
#pragma once

#include <cstdint>

namespace fold::cuda::hopper {

__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                            uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

}  // namespace fold::cuda::hopper
