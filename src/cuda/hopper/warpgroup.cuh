// Warpgroups (4 consecutive warps, 128 threads; warpgroup i = threads 128 i .. 128 i + 127)
// and the sm_90a register reallocation between them.
//
// A warp-specialised kernel launches with __launch_bounds__(threads, 1), so ptxas budgets
// 65536 / threads registers per thread (168 at 384 threads). setmaxnreg then moves
// registers between warpgroups at run time: the producer gives them up (dec to 24..40) and
// the consumers take them (inc to 232..240); the total must fit the 64K register file
// (e.g. 128 x 24 + 256 x 240 = 64512). Every warp of a warpgroup executes the same
// setmaxnreg (.sync.aligned); the count is a multiple of 8 in [24, 256].
#pragma once

#include <cstdint>

namespace fold::cuda::hopper {

constexpr int kWarpgroupThreads = 128;

__device__ __forceinline__ int warpgroup_index() {
  // Uniform across the warpgroup, and known to the compiler to be warp-uniform (each warp
  // broadcasts its lane 0's value), so values derived from it can live in uniform registers.
  return __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / kWarpgroupThreads, 0);
}
__device__ __forceinline__ int thread_in_warpgroup() {
  return static_cast<int>(threadIdx.x) % kWarpgroupThreads;
}

template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: 24..256, step 8");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: 24..256, step 8");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// Named barriers (bar.sync / bar.arrive with an id in 1..15; 0 is __syncthreads): `threads`
// (a multiple of 32) threads take part. sync blocks until all have arrived; arrive signals
// without waiting (the producer side of a handshake).
__device__ __forceinline__ void named_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// The same barrier without `.aligned` (bar.sync is barrier.sync.aligned): for threads that reach
// it through different instructions (e.g. different inlined copies of the same code), which the
// aligned form leaves undefined.
__device__ __forceinline__ void named_bar_sync_unaligned(int id, int threads) {
  asm volatile("barrier.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace fold::cuda::hopper
