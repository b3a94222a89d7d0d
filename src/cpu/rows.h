// Moving rows between the caller's strided [token, head, dim] tensors and the float
// buffers the CPU reference computes in.
#pragma once

#include <cstdint>

#include "core/half_types.h"
#include "core/problem.h"
#include "core/status.h"

namespace fold::cpu {

// Calls fn.template operator()<T>() with T the storage type of `dtype`.
template <class F>
void dispatch_dtype(int dtype, F &&fn) {
  switch (dtype) {
    case FOLD_DTYPE_F32:
      fn(float{});
      return;
    case FOLD_DTYPE_F16:
      fn(f16_t{});
      return;
    case FOLD_DTYPE_BF16:
      fn(bf16_t{});
      return;
    default:
      fail("unknown dtype");
  }
}

// Copies rows [i0, i0 + n) of head h of request b into dst[n][head_dim] as floats.
template <class T>
void load_rows(const fold_attn_problem_t &p, const fold_tensor_t &t, int b, const Request &r,
               int64_t i0, int n, int h, float *dst) {
  const T *base = static_cast<const T *>(t.data);
  for (int i = 0; i < n; ++i) {
    const T *row = base + element_offset(p, t, b, r, i0 + i, h);
    for (int d = 0; d < p.head_dim; ++d)
      dst[static_cast<int64_t>(i) * p.head_dim + d] = to_float(row[d]);
  }
}

// Writes src[n][head_dim], rounded to T, into rows [i0, i0 + n) of head h of request b.
template <class T>
void store_rows(const fold_attn_problem_t &p, const fold_tensor_t &t, int b, const Request &r,
                int64_t i0, int n, int h, const float *src) {
  T *base = static_cast<T *>(t.data);
  for (int i = 0; i < n; ++i) {
    T *row = base + element_offset(p, t, b, r, i0 + i, h);
    for (int d = 0; d < p.head_dim; ++d)
      row[d] = from_float<T>(src[static_cast<int64_t>(i) * p.head_dim + d]);
  }
}

// The reference's dot product: eight interleaved partial sums combined pairwise. A fixed
// order (so the reference is deterministic) that compilers can vectorise.
inline float dot(const float *a, const float *b, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int d = 0;
  for (; d + 8 <= n; d += 8)
    for (int k = 0; k < 8; ++k) acc[k] += a[d + k] * b[d + k];
  for (int k = 0; d < n; ++d, ++k) acc[k] += a[d] * b[d];
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

// y += a * x
inline void axpy(float a, const float *x, float *y, int n) {
  for (int d = 0; d < n; ++d) y[d] += a * x[d];
}

}  // namespace fold::cpu
