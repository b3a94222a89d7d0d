// Warpgroup MMA (wgmma.mma_async, SASS HGMMA) for sm_90a: shared-memory matrix descriptors,
// the fence / commit / wait protocol, and m64nNk16 bf16/fp16 -> fp32 in two forms:
//   SS: A and B both in shared memory (descriptors),
//   RS: A in registers (the per-thread fragment below), B in shared memory.
// The four warps of a warpgroup (128 threads, warp index / 4 equal) issue every call
// together; all of them must reach it (".sync.aligned").
//
// ---- Shared-memory layout: 128-byte swizzle (the layout TMA writes with SWIZZLE_128B) ----
// A tile is stored as "panels" of 64 16-bit elements (128 bytes) per row: panel p holds
// columns 64p..64p+63 of every row, rows 128 bytes apart, panels one after the other
// (panel stride = rows * 128 bytes). Inside a panel, the 16-byte chunk c of row r sits at
// chunk position c ^ (r % 8): eight rows (1024 bytes) form one "swizzle atom". A panel
// must start at a 1024-byte aligned address (then the matrix base offset field is 0).
// The "contiguous" dimension of the panel (the 64 elements) is what PTX calls the major
// dimension of the operand:
//   K-major: the reduction dimension is contiguous. A = Q [m][k] and B = K [n][k] of
//     S = Q K^T are K-major (tnsp = 0). One k16 step reads 32 bytes of each row; steps
//     inside a panel advance the start address by 32 bytes (the hardware applies the XOR
//     to the final address, so a start address inside the atom is fine), the next panel
//     starts at panel stride. SBO = 1024 (8 rows of 128 bytes: the distance between
//     consecutive 8-row groups along M/N); LBO is unused for swizzled K-major layouts (set
//     to 1 by convention, as its K extent per instruction (32 bytes) never leaves the atom).
//   MN-major ("transposed", 16-bit types only): M or N is contiguous. B = V [k][n] of
//     O = P V (keys k, head dim n contiguous) is MN-major (tnsp = 1); so are dO in
//     dV = P^T dO and Q in dK = dS^T Q (B operands [k = query][n = d]), and A = dS^T when
//     dS is stored [query][key] (A[m = key][k = query], m contiguous: tnsp-a = 1).
//     Per CUTLASS's canonical form ((T,8,m),(8,k)) : ((1,T,LBO),(8T,SBO)) with T = 8
//     elements: LBO = byte distance between consecutive 64-element panels along M/N
//     (= our panel stride, rows * 128), SBO = byte distance between consecutive groups
//     of 8 rows along K (= 1024). A k16 step is two 8-row groups: start address += 2048.
//
// ---- Descriptor bits (PTX "matrix descriptor") ----
//   [0,14)  start address >> 4     [16,30) LBO >> 4     [32,46) SBO >> 4
//   [49,52) matrix base offset (0: atoms 1024-aligned)   [62,64) swizzle: 1 = 128B,
//   2 = 64B, 3 = 32B, 0 = none (interleaved core matrices).
//
// ---- Register fragments (per warpgroup thread t; warp w = (t / 32) % 4, lane = 4 g + q) ----
//   Accumulator D[64 x N] fp32, N/2 registers d[i]: row 16 w + g + 8 ((i >> 1) & 1),
//     column 8 (i >> 2) + 2 q + (i & 1). (Per n8 tile j: d[4j..4j+3] is the C fragment of
//     mma.m16n8: {row g: cols 2q, 2q+1}, {row g+8: the same}.)
//   A[64 x 16] 16-bit in registers (RS): four 32-bit registers, each two elements (low
//     half = lower column): a0 = (row g, cols 2q..2q+1), a1 = (g+8, 2q..), a2 = (g, 2q+8..),
//     a3 = (g+8, 2q+8..), rows relative to 16 w. So the accumulator tiles 2kk and 2kk+1 of
//     one GEMM, rounded and packed, are the A operand of k-step kk of the next (P in P V).
//
// ---- Protocol ----
//   fence()        before the first wgmma that reads registers written by ordinary code
//                  (accumulators, A fragments), and after smem written by generic stores
//                  the async proxy must see, use fence_proxy_async() (in tma.cuh) first.
//   wgmma_*(...)   issue (asynchronous: accumulator registers must not be read or
//                  written until a wait covers them; fence_operand() keeps the compiler
//                  from moving such accesses across the wait).
//   commit()       closes the group of wgmmas issued since the last commit.
//   wait<n>()      blocks until at most n groups are pending.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/hopper/wgmma_ops.cuh"

namespace fold::cuda::hopper {

enum class Swizzle : uint64_t { kNone = 0, k128B = 1, k64B = 2, k32B = 3 };

// Descriptor of the matrix at shared address `addr` (bytes, 16-aligned; 1024-aligned atoms
// for the swizzled modes). lbo, sbo in bytes (see the layout notes above).
__device__ __forceinline__ uint64_t make_desc(uint32_t addr, uint32_t lbo, uint32_t sbo,
                                              Swizzle swizzle = Swizzle::k128B) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((addr >> 4) & 0x3fffu);
  d |= static_cast<uint64_t>((lbo >> 4) & 0x3fffu) << 16;
  d |= static_cast<uint64_t>((sbo >> 4) & 0x3fffu) << 32;
  d |= static_cast<uint64_t>(swizzle) << 62;
  return d;
}

// K-major, 128B swizzle, panels of 64 elements: the operand starting at `addr` (row 0 of a
// panel, or 32 bytes * k-step inside it).
__device__ __forceinline__ uint64_t desc_k_major_sw128(uint32_t addr) {
  return make_desc(addr, 16, 1024);
}
// MN-major, 128B swizzle: `panel_bytes` = distance between 64-element panels along M/N.
__device__ __forceinline__ uint64_t desc_mn_major_sw128(uint32_t addr, uint32_t panel_bytes) {
  return make_desc(addr, panel_bytes, 1024);
}
// Advances a descriptor's start address by `bytes` (a multiple of 16).
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) {
  return desc + static_cast<uint64_t>(bytes >> 4);
}

__device__ __forceinline__ void fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wait() {
  static_assert(kPending >= 0 && kPending <= 7, "wgmma.wait_group takes 0..7");
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Pins registers in place around asynchronous wgmma: an empty volatile asm that "reads and
// writes" them, so the compiler neither reads an accumulator before the wait nor moves an
// update after the issue.
__device__ __forceinline__ void fence_operand(float &x) { asm volatile("" : "+f"(x)::"memory"); }
__device__ __forceinline__ void fence_operand(uint32_t &x) { asm volatile("" : "+r"(x)::"memory"); }
template <int N>
__device__ __forceinline__ void fence_operands(float (&x)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) fence_operand(x[i]);
}

// D[64 x N] = A B (scale_d == 0) or D + A B (scale_d != 0). T: __nv_bfloat16 or __half.
// kTnspA / kTnspB: 0 = K-major, 1 = MN-major (transposed) operand.
template <int N, class T, int kTnspA, int kTnspB>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b,
                                         int scale_d) {
  using namespace detail;
  if constexpr (N == 16)
    wgmma_ss_n16<T, kTnspA, kTnspB>(d, desc_a, desc_b, scale_d);
  else if constexpr (N == 32)
    wgmma_ss_n32<T, kTnspA, kTnspB>(d, desc_a, desc_b, scale_d);
  else if constexpr (N == 64)
    wgmma_ss_n64<T, kTnspA, kTnspB>(d, desc_a, desc_b, scale_d);
  else if constexpr (N == 96)
    wgmma_ss_n96<T, kTnspA, kTnspB>(d, desc_a, desc_b, scale_d);
  else if constexpr (N == 128)
    wgmma_ss_n128<T, kTnspA, kTnspB>(d, desc_a, desc_b, scale_d);
  else if constexpr (N == 192)
    wgmma_ss_n192<T, kTnspA, kTnspB>(d, desc_a, desc_b, scale_d);
  else if constexpr (N == 256)
    wgmma_ss_n256<T, kTnspA, kTnspB>(d, desc_a, desc_b, scale_d);
  else
    static_assert(N == 16, "no wrapper generated for this N (scripts/gen_wgmma.py)");
}

// D[64 x N] (+)= A B with A from registers (fragment layout above; A is K-major by
// construction, so only B has a transpose flag).
template <int N, class T, int kTnspB>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b,
                                         int scale_d) {
  using namespace detail;
  if constexpr (N == 16)
    wgmma_rs_n16<T, kTnspB>(d, a, desc_b, scale_d);
  else if constexpr (N == 32)
    wgmma_rs_n32<T, kTnspB>(d, a, desc_b, scale_d);
  else if constexpr (N == 64)
    wgmma_rs_n64<T, kTnspB>(d, a, desc_b, scale_d);
  else if constexpr (N == 96)
    wgmma_rs_n96<T, kTnspB>(d, a, desc_b, scale_d);
  else if constexpr (N == 128)
    wgmma_rs_n128<T, kTnspB>(d, a, desc_b, scale_d);
  else if constexpr (N == 192)
    wgmma_rs_n192<T, kTnspB>(d, a, desc_b, scale_d);
  else if constexpr (N == 256)
    wgmma_rs_n256<T, kTnspB>(d, a, desc_b, scale_d);
  else
    static_assert(N == 16, "no wrapper generated for this N (scripts/gen_wgmma.py)");
}

}  // namespace fold::cuda::hopper
