// Warp-level building blocks of the training kernels (v0): cp.async tile loads into padded
// shared memory, ldmatrix fragment loads and the m16n8k16 tensor-core MMA (HMMA, fp32
// accumulation) for bf16 and fp16.
//
// Shared-memory tiles are row-major [rows][D + kPad] in 16-bit elements. The pad of 8
// elements (16 bytes) shifts consecutive rows by 16 bytes modulo 128, so the eight row
// addresses of one 8x8 ldmatrix hit eight different bank groups for every D in
// {64, 96, 128, 256} (no swizzle needed, and D = 96 works too).
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with .row.col): lane = 4 g + t.
//   A (16x16): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
//   B (16x8):  b0 = (k 2t..2t+1, n g), b1 = (k 2t+8.., n g)
//   C (16x8):  c0,c1 = (g, 2t..2t+1), c2,c3 = (g+8, 2t..2t+1)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/problem.h"

namespace fold::cuda::tile {

constexpr int kPad = 8;

struct Bf16 {
  using T = __nv_bfloat16;
};
struct F16 {
  using T = __half;
};

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Two floats rounded (nearest-even) to one 32-bit register of 16-bit values, lo first.
__device__ __forceinline__ uint32_t pack2(float lo, float hi, Bf16) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t *>(&v);
}
__device__ __forceinline__ uint32_t pack2(float lo, float hi, F16) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t *>(&v);
}

__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                    Bf16) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                    F16) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// A fragment of the 16x16 block at (row0, col0) of a row-major [.][ld] tile.
__device__ __forceinline__ void load_a(uint32_t (&a)[4], uint32_t base, int ld, int row0, int col0,
                                       int lane) {
  const int row = row0 + (lane & 7) + ((lane >> 3) & 1) * 8;
  const int col = col0 + (lane >> 4) * 8;
  ldsm_x4(a, base + 2u * static_cast<uint32_t>(row * ld + col));
}

// A fragment of the 16x16 block A[m][k] = S[k][m] with S row-major: the block of S at
// rows (k) k0.., cols (m) m0...
__device__ __forceinline__ void load_a_trans(uint32_t (&a)[4], uint32_t base, int ld, int k0,
                                             int m0, int lane) {
  const int mi = lane >> 3;
  const int row = k0 + (lane & 7) + (mi >> 1) * 8;
  const int col = m0 + (mi & 1) * 8;
  ldsm_x4_trans(a, base + 2u * static_cast<uint32_t>(row * ld + col));
}

// B fragments of two n-tiles (n0.., n0+8..) for k-step k0.., where B[k][n] = S[n][k] and S is
// row-major (K in Q.K^T). b[0], b[1]: n-tile n0; b[2], b[3]: n-tile n0 + 8.
__device__ __forceinline__ void load_b_nk(uint32_t (&b)[4], uint32_t base, int ld, int n0, int k0,
                                          int lane) {
  const int row = n0 + (lane & 7) + (lane >> 4) * 8;
  const int col = k0 + ((lane >> 3) & 1) * 8;
  ldsm_x4(b, base + 2u * static_cast<uint32_t>(row * ld + col));
}

// B fragments of two n-tiles for k-step k0.., where B[k][n] = S[k][n] with S row-major
// (V in P.V). b[0], b[1]: n-tile n0; b[2], b[3]: n-tile n0 + 8.
__device__ __forceinline__ void load_b_kn(uint32_t (&b)[4], uint32_t base, int ld, int k0, int n0,
                                          int lane) {
  const int row = k0 + (lane & 7) + ((lane >> 3) & 1) * 8;
  const int col = n0 + (lane >> 4) * 8;
  ldsm_x4_trans(b, base + 2u * static_cast<uint32_t>(row * ld + col));
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, bool valid) {
  const int bytes = valid ? 16 : 0;  // 0: the 16 bytes are zero-filled, src is not read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// Copies rows [row0, row0 + ROWS) of head `head` of request b (zeros past the request's end)
// into a [ROWS][D + kPad] shared tile, with all threads of the block.
template <int ROWS, int D, int THREADS>
__device__ __forceinline__ void load_tile(void *smem, const fold_attn_problem_t &p,
                                          const fold_tensor_t &t, int b, const Request &r,
                                          int64_t row0, int head) {
  constexpr int kChunks = D / 8;
  const uint32_t base = smem_addr(smem);
  const char *data = static_cast<const char *>(t.data);
  for (int idx = threadIdx.x; idx < ROWS * kChunks; idx += THREADS) {
    const int row = idx / kChunks;
    const int chunk = idx % kChunks;
    const bool valid = row0 + row < r.len;
    const char *src =
        valid ? data + (element_offset(p, t, b, r, row0 + row, head) + chunk * 8) * 2 : data;
    cp_async16(base + 2u * static_cast<uint32_t>(row * (D + kPad) + chunk * 8), src, valid);
  }
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace fold::cuda::tile
