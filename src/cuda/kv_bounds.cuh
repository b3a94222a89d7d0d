// max|K| and max|V| of a range of one request's rows, as the bits of the backward's bounds
// (FOLD_BOUND_MAX_ABS_K / _V, ALGORITHMS.md section 5).
//
// Why here: the training forward can take these maxima while it runs (idle producer warps read
// the K / V tiles its TMA loads bring into shared memory), so the backward's preprocess does
// not read K and V a second time from DRAM.
//
// Bit-exactness with the preprocess (bwd_preprocess.cu), which takes the max of
// abs_bits_canonical(float(x)): the magnitude bits of a 16-bit float (x & 0x7fff) order its
// |x| exactly as the converted float's bits do (the conversions are exact and monotone, and
// every NaN lies above inf in both), so the max over 16-bit magnitudes, converted once at the
// end and canonicalised, is the same bits.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/float_bits.h"
#include "core/problem.h"
#include "fold_attention/fold_attention.h"

namespace fold::cuda {

// Both 16-bit magnitudes of each word of raw, folded into m (two lanes of 16 bits).
__device__ __forceinline__ uint32_t max_abs16x2(uint32_t m, const uint4 raw) {
  constexpr uint32_t kMag = 0x7fff7fffu;
  m = __vmaxu2(m, __vmaxu2(raw.x & kMag, raw.y & kMag));
  return __vmaxu2(m, __vmaxu2(raw.z & kMag, raw.w & kMag));
}

// The float bits of the larger magnitude held in m's two lanes (abs_bits_canonical order).
__device__ __forceinline__ uint32_t abs16_max_bits(uint32_t m, __nv_bfloat16) {
  const uint32_t h = max(m & 0xffffu, m >> 16);
  return h > 0x7f80u ? kCanonicalNaN : h << 16;  // bf16 -> float is a 16-bit shift
}
__device__ __forceinline__ uint32_t abs16_max_bits(uint32_t m, __half) {
  const uint32_t h = max(m & 0xffffu, m >> 16);
  return abs_bits_canonical(__half2float(__ushort_as_half(static_cast<unsigned short>(h))));
}

// 16 bytes of shared memory at a shared-window address. volatile: it stays after the mbarrier
// wait that makes the bytes valid (asm without it may be hoisted above that wait).
__device__ __forceinline__ uint4 lds128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr));
  return v;
}

// max_abs16x2 over the first `rows` rows of a K or V tile in shared memory (shared-window
// address `tile`), laid out as the forward's stages are: panels of kPanelBytes (64 columns, 128
// bytes a row, 16-byte chunks swizzled within their row only, so a chunk's row is its offset
// within the panel / 128). kThreads threads (tid in [0, kThreads)) share the 16-byte chunks.
// Rows past `rows` (the next packed request's keys, or zeros) are not read at all: the
// consumers may be zeroing them meanwhile (the V tail). The stage stays held until every chunk
// is read, so the loads go out in groups of four (ld.shared with 32-bit addresses).
template <int kBytes, int kPanelBytes, int kThreads>
__device__ __forceinline__ uint32_t tile_abs_max(uint32_t tile, int rows, int tid, uint32_t m) {
  constexpr int kStep = kThreads * 16;
  int o = tid * 16;
  for (; o + 3 * kStep < kBytes; o += 4 * kStep) {
    uint4 x[4];
#pragma unroll
    for (int u = 0; u < 4; ++u)
      x[u] = ((o + u * kStep) % kPanelBytes) >> 7 < rows ? lds128(tile + o + u * kStep)
                                                         : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < 4; ++u) m = max_abs16x2(m, x[u]);
  }
  for (; o < kBytes; o += kStep)
    if ((o % kPanelBytes) >> 7 < rows) m = max_abs16x2(m, lds128(tile + o));
  return m;
}

// The warp's maxima, as bounds bits, into bounds[(b, hk)] (atomicMax; zeros are the identity
// and are not sent). Every lane of the warp calls it.
template <class T>
__device__ __forceinline__ void kv_bounds_publish(uint32_t mk, uint32_t mv, uint32_t *bounds,
                                                  const fold_attn_problem_t &p, int b, int hk) {
  const uint32_t bk = __reduce_max_sync(0xffffffffu, abs16_max_bits(mk, T{}));
  const uint32_t bv = __reduce_max_sync(0xffffffffu, abs16_max_bits(mv, T{}));
  if ((threadIdx.x & 31) == 0) {
    uint32_t *slot = bounds + (static_cast<int64_t>(b) * p.n_kv_heads + hk) * FOLD_BWD_BOUNDS;
    if (bk != 0) atomicMax(slot + FOLD_BOUND_MAX_ABS_K, bk);
    if (bv != 0) atomicMax(slot + FOLD_BOUND_MAX_ABS_V, bv);
  }
}

}  // namespace fold::cuda
