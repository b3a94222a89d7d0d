// The canonical reduction order for a per-row dot product of two length-D vectors
// (Delta_i = dO_i . O_i and ||dO_i||^2 in the backward preprocess).
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

}  // namespace fold
