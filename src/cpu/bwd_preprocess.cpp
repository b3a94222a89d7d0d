// CPU reference of the backward preprocess. Its bits are the specification that the CUDA
// preprocess must reproduce: Delta and ||dO|| follow row_reduce.h's canonical order, and
// the bounds are order-free maxima over canonicalised |x| bits (float_bits.h).
#include <algorithm>
#include <vector>

#include "core/float_bits.h"
#include "core/row_reduce.h"
#include "cpu/parallel.h"
#include "cpu/reference.h"
#include "cpu/rows.h"

namespace fold::cpu {

namespace {

template <class T>
void preprocess_group(const fold_attn_problem_t &p, const fold_tensor_t &k, const fold_tensor_t &v,
                      const fold_tensor_t &out, const fold_tensor_t &dout, float *delta,
                      float *bounds, int b, int hk) {
  const Request r = request_of(p, b);
  const int D = p.head_dim;
  const int group = p.n_heads / p.n_kv_heads;
  uint32_t max_k = 0, max_v = 0, max_do_norm = 0, max_delta = 0;
  std::vector<float> row_a(D), row_b(D);
  for (int64_t i = 0; i < r.len; ++i) {
    load_rows<T>(p, k, b, r, i, 1, hk, row_a.data());
    load_rows<T>(p, v, b, r, i, 1, hk, row_b.data());
    for (int d = 0; d < D; ++d) {
      max_k = std::max(max_k, abs_bits_canonical(row_a[d]));
      max_v = std::max(max_v, abs_bits_canonical(row_b[d]));
    }
    for (int h = hk * group; h < (hk + 1) * group; ++h) {
      load_rows<T>(p, dout, b, r, i, 1, h, row_a.data());
      load_rows<T>(p, out, b, r, i, 1, h, row_b.data());
      const float dlt = canonical_nan(canonical_dot(
          D, [&](int d) { return row_a[d]; }, [&](int d) { return row_b[d]; }));
      const float norm = canonical_norm(D, [&](int d) { return row_a[d]; });
      delta[static_cast<int64_t>(h) * p.total_tokens + r.first + i] = dlt;
      max_delta = std::max(max_delta, abs_bits_canonical(dlt));
      max_do_norm = std::max(max_do_norm, abs_bits_canonical(norm));
    }
  }
  float *out_bounds = bounds + (static_cast<int64_t>(b) * p.n_kv_heads + hk) * FOLD_BWD_BOUNDS;
  out_bounds[FOLD_BOUND_MAX_ABS_K] = bits_to_float(max_k);
  out_bounds[FOLD_BOUND_MAX_ABS_V] = bits_to_float(max_v);
  out_bounds[FOLD_BOUND_MAX_DO_NORM] = bits_to_float(max_do_norm);
  out_bounds[FOLD_BOUND_MAX_ABS_DELTA] = bits_to_float(max_delta);
}

}  // namespace

void bwd_preprocess(const fold_attn_problem_t &p, fold_tensor_t k, fold_tensor_t v,
                    fold_tensor_t out, fold_tensor_t dout, float *delta, float *bounds) {
  dispatch_dtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    parallel_for(static_cast<int64_t>(p.batch) * p.n_kv_heads, [&](int64_t item) {
      preprocess_group<T>(p, k, v, out, dout, delta, bounds, static_cast<int>(item / p.n_kv_heads),
                          static_cast<int>(item % p.n_kv_heads));
    });
  });
}

}  // namespace fold::cpu
