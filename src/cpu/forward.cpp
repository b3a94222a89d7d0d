// CPU reference forward: tiled online softmax in base 2, as the GPU forward computes it.
//
// Per (request, head, query block): scores s = (q . k) * scale * log2(e) in fp32; a running
// row max m and sum l; P = 2^(s - m) is summed in fp32 and rounded to the input dtype
// before the P.V product (the GPU's 16-bit operand); out = acc / l; lse = (m + log2 l) ln 2.
// Masked keys (causal, sliding window: core/window.h) get s = -inf; every row sees its own key.
#include <cmath>
#include <limits>
#include <vector>

#include "core/tile_plan.h"
#include "core/window.h"
#include "cpu/parallel.h"
#include "cpu/reference.h"
#include "cpu/rows.h"

namespace fold::cpu {

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// A sink's mass (base-2 logit s2) joins each row's running sum as one more key of value zero:
// the running max moves to it where it is larger (the sum and the accumulator rescaled as for a
// key block), and 2^(s2 - m) adds to the sum only. Without sinks nothing here runs, so those
// results keep their bits.
void add_sink(float s2, int rows, int D, float *m, float *l, float *acc) {
  for (int i = 0; i < rows; ++i) {
    const float m_new = std::max(m[i], s2);
    const float alpha = std::exp2(m[i] - m_new);  // (m finite: every row sees its own key)
    for (int d = 0; d < D; ++d) acc[static_cast<size_t>(i) * D + d] *= alpha;
    l[i] = l[i] * alpha + std::exp2(s2 - m_new);
    m[i] = m_new;
  }
}

template <class T>
void forward_head(const fold_attn_problem_t &p, const fold_tensor_t &q, const fold_tensor_t &k,
                  const fold_tensor_t &v, const fold_tensor_t &out, float *lse, int b, int h) {
  const Request r = request_of(p, b);
  if (r.len == 0) return;
  const int D = p.head_dim;
  const int hk = h / (p.n_heads / p.n_kv_heads);
  const TilePlan plan = forward_plan(D);
  const float scale_log2 = p.softmax_scale * kLog2e;
  const float neg_inf = -std::numeric_limits<float>::infinity();

  std::vector<float> qs(static_cast<size_t>(plan.block_m) * D),
      ks(static_cast<size_t>(plan.block_n) * D), vs(static_cast<size_t>(plan.block_n) * D),
      acc(static_cast<size_t>(plan.block_m) * D);
  std::vector<float> m(plan.block_m), l(plan.block_m), srow(plan.block_n);

  for (int64_t q0 = 0; q0 < r.len; q0 += plan.block_m) {
    const int bm = static_cast<int>(std::min<int64_t>(plan.block_m, r.len - q0));
    load_rows<T>(p, q, b, r, q0, bm, h, qs.data());
    std::fill(acc.begin(), acc.end(), 0.0f);
    std::fill(m.begin(), m.end(), neg_inf);
    std::fill(l.begin(), l.end(), 0.0f);
    // Key blocks that can hold a visible key, aligned to the request's start like the
    // kernels' (a sliding window skips the blocks wholly before or after it).
    int64_t k_lo = 0, k_end = 0;
    visible_keys(p, q0, q0 + bm, r.len, &k_lo, &k_end);
    for (int64_t k0 = k_lo / plan.block_n * plan.block_n; k0 < k_end; k0 += plan.block_n) {
      const int bn = static_cast<int>(std::min<int64_t>(plan.block_n, k_end - k0));
      load_rows<T>(p, k, b, r, k0, bn, hk, ks.data());
      load_rows<T>(p, v, b, r, k0, bn, hk, vs.data());
      for (int i = 0; i < bm; ++i) {
        const float *qi = &qs[static_cast<size_t>(i) * D];
        float row_max = m[i];
        for (int j = 0; j < bn; ++j) {
          const bool masked = !key_visible(p, q0 + i, k0 + j);
          srow[j] = masked ? neg_inf : dot(qi, &ks[static_cast<size_t>(j) * D], D) * scale_log2;
          row_max = std::max(row_max, srow[j]);
        }
        if (row_max == neg_inf) continue;  // every key of this block is masked for row i
        const float alpha = m[i] == neg_inf ? 0.0f : std::exp2(m[i] - row_max);
        float *ai = &acc[static_cast<size_t>(i) * D];
        for (int d = 0; d < D; ++d) ai[d] *= alpha;
        float sum = l[i] * alpha;
        for (int j = 0; j < bn; ++j) {
          const float pij = std::exp2(srow[j] - row_max);  // exp2(-inf) = 0 for masked keys
          sum += pij;
          axpy(round_to<T>(pij), &vs[static_cast<size_t>(j) * D], ai, D);
        }
        l[i] = sum;
        m[i] = row_max;
      }
    }
    if (p.sinks != nullptr) add_sink(p.sinks[h] * kLog2e, bm, D, m.data(), l.data(), acc.data());
    for (int i = 0; i < bm; ++i) {
      const float inv = 1.0f / l[i];
      float *ai = &acc[static_cast<size_t>(i) * D];
      for (int d = 0; d < D; ++d) ai[d] *= inv;
      lse[static_cast<int64_t>(h) * p.total_tokens + r.first + q0 + i] =
          (m[i] + std::log2(l[i])) * kLn2;
    }
    store_rows<T>(p, out, b, r, q0, bm, h, acc.data());
  }
}

}  // namespace

void forward(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k, fold_tensor_t v,
             fold_tensor_t out, float *lse) {
  dispatch_dtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    parallel_for(static_cast<int64_t>(p.batch) * p.n_heads, [&](int64_t item) {
      forward_head<T>(p, q, k, v, out, lse, static_cast<int>(item / p.n_heads),
                      static_cast<int>(item % p.n_heads));
    });
  });
}

}  // namespace fold::cpu
