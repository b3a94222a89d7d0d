// The canonical reduction order for a per-row dot product of two length-D vectors
// (Delta_i = dO_i . O_i in the backward preprocess), and the canonical scaled norm ||dO_i||.
//
// Invariant: the CPU reference and the CUDA kernel produce the same bits because both
// follow this order exactly:
//   1. the row is cut into chunks of kChunk = 8 consecutive elements (one 16-byte load of
//      a 16-bit type on the GPU); chunk c accumulates its elements in index order with
//      correctly rounded fused multiply-adds, starting from +0.0f;
//   2. the chunk sums sit in W = next_pow2(ceil(D / 8)) lanes (missing chunks hold +0.0f)
//      and are combined by a butterfly: for off = W/2, W/4, ..., 1, lane c takes
//      lane[c] + lane[c ^ off]. Every lane ends with the same value; lane 0's is the result.
#pragma once

#include <cmath>

#include "core/float_bits.h"
#include "core/host_device.h"

namespace fold {

constexpr int kChunk = 8;
constexpr int kMaxLanes = 32;  // 256 / 8: the widest row the library accepts

FOLD_HD int reduce_lanes(int head_dim) {
  const int chunks = (head_dim + kChunk - 1) / kChunk;
  int w = 1;
  while (w < chunks) w <<= 1;
  return w;
}

// Host implementation of the canonical order. a(d) and b(d) return element d as float.
template <class LoadA, class LoadB>
inline float canonical_dot(int head_dim, LoadA a, LoadB b) {
  const int w = reduce_lanes(head_dim);
  float lane[kMaxLanes];
  for (int c = 0; c < w; ++c) {
    float acc = 0.0f;
    for (int e = 0; e < kChunk; ++e) {
      const int d = c * kChunk + e;
      if (d < head_dim) acc = std::fma(a(d), b(d), acc);
    }
    lane[c] = acc;
  }
  for (int off = w / 2; off >= 1; off /= 2) {
    float next[kMaxLanes];
    for (int c = 0; c < w; ++c) next[c] = lane[c] + lane[c ^ off];
    for (int c = 0; c < w; ++c) lane[c] = next[c];
  }
  return lane[0];
}

// The canonical norm of a row x (||dO_i|| in the backward preprocess). A plain sum of squares
// overflows float32 once ||x|| > ~1.8e19 and underflows for |x| < ~1e-19, and either breaks the
// backward's grid bound (session 31's input audit: dO ~ 1e19 gave NaN gradients, dO ~ 1e-30 a
// wrong dQ). So:
//   q = canonical_dot(x, x);
//   if kNormLow <= q < inf:  ||x|| = sqrt_rn(q)              (every ordinary row: the plain norm,
//                                                            which is what the bound was before)
//   else:                    ||x|| = sqrt_rn(S) * 2^c,  S = canonical_dot(x 2^-c, x 2^-c),
//                            m = max_d |x_d|, c = clamp(e(m), -126, 126), m < 2^e(m)
//                            (+0.0 and subnormal m give -126; S < 4 D, < 16 D where c is capped)
// In the first case no square that matters underflowed: q >= 2^-64 puts the largest square at
// >= 2^-64 / D, so a square lost below 2^-126 is < 2^-54 D of it. The second case (rows of
// huge, tiny, zero or non-finite values) costs a max over the row and a second sum, which the
// common case skips (the GPU preprocess takes it only in warps that need it).
constexpr float kNormLow = 5.421010862427522e-20f;  // 2^-64

FOLD_HD int norm_exponent(uint32_t max_abs_bits) {
  const int biased = static_cast<int>((max_abs_bits >> 23) & 0xffu);
  const int e = biased == 0 ? -126 : biased - 126;
  return e > 126 ? 126 : e;
}

// Whether q = canonical_dot(x, x) is the norm's plain case: kNormLow <= q <= FLT_MAX, as one
// unsigned range test on the bits (false for NaN and -0.0 too; q is never negative otherwise).
FOLD_HD bool norm_is_plain(float q) {
  constexpr uint32_t kLow = 0x1f800000u;   // 2^-64 = kNormLow
  constexpr uint32_t kHigh = 0x7f7fffffu;  // FLT_MAX
  return float_to_bits(q) - kLow <= kHigh - kLow;
}

// Host implementation. a(d) returns element d as float.
template <class LoadA>
inline float canonical_norm(int head_dim, LoadA a) {
  const float q = canonical_dot(head_dim, a, a);
  if (norm_is_plain(q)) return std::sqrt(q);
  uint32_t m = 0;
  for (int d = 0; d < head_dim; ++d) {
    const uint32_t bits = abs_bits_canonical(a(d));
    m = bits > m ? bits : m;
  }
  const int c = norm_exponent(m);
  const float down = exp2i(-c);
  const float sum = canonical_dot(
      head_dim, [&](int d) { return a(d) * down; }, [&](int d) { return a(d) * down; });
  return std::sqrt(sum) * exp2i(c);
}

}  // namespace fold
