// Test helpers: typed host tensors, random batches, and a naive float64 attention.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/half_types.h"
#include "fold_attention/fold_attention.h"

namespace fold::test {

// A packed [tokens, heads, dim] tensor of one dtype, stored as raw bytes.
struct HostTensor {
  int dtype = FOLD_DTYPE_F32;
  int64_t tokens = 0;
  int heads = 0, dim = 0;
  std::vector<unsigned char> bytes;

  HostTensor() = default;
  HostTensor(int dtype_, int64_t tokens_, int heads_, int dim_)
      : dtype(dtype_),
        tokens(tokens_),
        heads(heads_),
        dim(dim_),
        bytes(static_cast<size_t>(tokens_ * heads_ * dim_) * (dtype_ == FOLD_DTYPE_F32 ? 4 : 2)) {}
  int64_t size() const { return tokens * heads * dim; }
  float get(int64_t i) const {
    if (dtype == FOLD_DTYPE_F32) {
      float x;
      std::memcpy(&x, &bytes[i * 4], 4);
      return x;
    }
    uint16_t u;
    std::memcpy(&u, &bytes[i * 2], 2);
    return dtype == FOLD_DTYPE_BF16 ? to_float(bf16_t{u}) : to_float(f16_t{u});
  }
  void set(int64_t i, float x) {
    if (dtype == FOLD_DTYPE_F32) {
      std::memcpy(&bytes[i * 4], &x, 4);
      return;
    }
    const uint16_t u = dtype == FOLD_DTYPE_BF16 ? bf16_from_float(x).bits : f16_from_float(x).bits;
    std::memcpy(&bytes[i * 2], &u, 2);
  }
  float at(int64_t t, int h, int d) const { return get((t * heads + h) * dim + d); }
  fold_tensor_t view() {
    return fold_tensor_t{bytes.data(), 0, static_cast<int64_t>(heads) * dim, dim};
  }
  void fill_normal(std::mt19937_64 &rng, float scale = 1.0f, float offset = 0.0f) {
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (int64_t i = 0; i < size(); ++i) set(i, offset + scale * n(rng));
  }
};

struct Case {
  std::vector<int32_t> lengths;
  int n_heads = 4, n_kv_heads = 2, head_dim = 64, dtype = FOLD_DTYPE_BF16, causal = 1;
  int window_before = 0, window_after = 0;  // 0: unbounded
};

// A packed problem over `cu` (host offsets) for a case.
inline fold_attn_problem_t packed_problem(const Case &c, const std::vector<int32_t> &cu) {
  fold_attn_problem_t p{};
  p.batch = static_cast<int32_t>(c.lengths.size());
  p.seqlen = 0;
  for (int32_t l : c.lengths) p.seqlen = std::max(p.seqlen, l);
  p.cu_seqlens = cu.data();
  p.total_tokens = cu.back();
  p.n_heads = c.n_heads;
  p.n_kv_heads = c.n_kv_heads;
  p.head_dim = c.head_dim;
  p.dtype = c.dtype;
  p.causal = c.causal;
  p.window_before = c.window_before;
  p.window_after = c.window_after;
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  return p;
}

inline std::vector<int32_t> offsets(const std::vector<int32_t> &lengths) {
  std::vector<int32_t> cu{0};
  for (int32_t l : lengths) cu.push_back(cu.back() + l);
  return cu;
}

// Naive float64 attention over one request of a packed batch; also its gradients.
struct Naive {
  std::vector<double> out, lse, dq, dk, dv;  // out/dq: [tokens][H][D], dk/dv: [tokens][Hkv][D]
  std::vector<double> dsinks;                // [H], with p.sinks
};

inline Naive naive_attention(const fold_attn_problem_t &p, const HostTensor &q, const HostTensor &k,
                             const HostTensor &v, const HostTensor *dout) {
  const int H = p.n_heads, Hk = p.n_kv_heads, D = p.head_dim, G = H / Hk;
  const int64_t T = p.total_tokens;
  Naive n;
  n.out.assign(static_cast<size_t>(T * H * D), 0.0);
  n.lse.assign(static_cast<size_t>(T * H), 0.0);
  n.dq.assign(static_cast<size_t>(T * H * D), 0.0);
  n.dk.assign(static_cast<size_t>(T * Hk * D), 0.0);
  n.dv.assign(static_cast<size_t>(T * Hk * D), 0.0);
  n.dsinks.assign(static_cast<size_t>(H), 0.0);
  for (int b = 0; b < p.batch; ++b) {
    const int64_t t0 = p.cu_seqlens[b], len = p.cu_seqlens[b + 1] - t0;
    for (int h = 0; h < H; ++h) {
      const int hk = h / G;
      for (int64_t i = 0; i < len; ++i) {
        // Keys [j0, j0 + nk) are visible: causal, then the window's two sides (written out
        // here rather than through core/window.h, so the reference's rule is tested).
        int64_t j0 = 0, j1 = p.causal ? i + 1 : len;
        if (p.window_before > 0) j0 = std::max<int64_t>(0, i - p.window_before + 1);
        if (p.window_after > 0) j1 = std::min<int64_t>(j1, i + p.window_after);
        const int64_t nk = j1 - j0;
        // s / pr index the visible keys: entry jj is key j0 + jj.
        std::vector<double> s(static_cast<size_t>(nk)), pr(static_cast<size_t>(nk));
        double mx = -INFINITY;
        for (int64_t jj = 0; jj < nk; ++jj) {
          double acc = 0;
          for (int d = 0; d < D; ++d) acc += double(q.at(t0 + i, h, d)) * k.at(t0 + j0 + jj, hk, d);
          s[jj] = acc * p.softmax_scale;
          mx = std::max(mx, s[jj]);
        }
        // A sink: one more logit in the denominator, with no value.
        const double sink = p.sinks ? double(p.sinks[h]) : -INFINITY;
        mx = std::max(mx, sink);
        double sum = p.sinks ? std::exp(sink - mx) : 0.0;
        for (int64_t jj = 0; jj < nk; ++jj) sum += (pr[jj] = std::exp(s[jj] - mx));
        for (int64_t jj = 0; jj < nk; ++jj) pr[jj] /= sum;
        n.lse[(t0 + i) * H + h] = mx + std::log(sum);
        double *o = &n.out[((t0 + i) * H + h) * D];
        for (int64_t jj = 0; jj < nk; ++jj)
          for (int d = 0; d < D; ++d) o[d] += pr[jj] * v.at(t0 + j0 + jj, hk, d);
        if (!dout) continue;
        double delta = 0;
        for (int d = 0; d < D; ++d) delta += double(dout->at(t0 + i, h, d)) * o[d];
        if (p.sinks) n.dsinks[h] -= std::exp(sink - n.lse[(t0 + i) * H + h]) * delta;
        for (int64_t jj = 0; jj < nk; ++jj) {
          const int64_t j = j0 + jj;
          double dp = 0;
          for (int d = 0; d < D; ++d) dp += double(dout->at(t0 + i, h, d)) * v.at(t0 + j, hk, d);
          const double ds = pr[jj] * (dp - delta);
          for (int d = 0; d < D; ++d) {
            n.dv[((t0 + j) * Hk + hk) * D + d] += pr[jj] * dout->at(t0 + i, h, d);
            n.dq[((t0 + i) * H + h) * D + d] += ds * k.at(t0 + j, hk, d) * p.softmax_scale;
            n.dk[((t0 + j) * Hk + hk) * D + d] += ds * q.at(t0 + i, h, d) * p.softmax_scale;
          }
        }
      }
    }
  }
  return n;
}

// ||x - ref|| / ||ref|| over all elements.
inline double rel_error(const HostTensor &x, const std::vector<double> &ref) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < x.size(); ++i) {
    const double d = x.get(i) - ref[static_cast<size_t>(i)];
    num += d * d;
    den += ref[static_cast<size_t>(i)] * ref[static_cast<size_t>(i)];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// The error of rounding the reference once to the dtype: the floor any kernel can reach.
inline double rounding_floor(int dtype, const std::vector<double> &ref) {
  HostTensor t(dtype, static_cast<int64_t>(ref.size()), 1, 1);
  for (size_t i = 0; i < ref.size(); ++i)
    t.set(static_cast<int64_t>(i), static_cast<float>(ref[i]));
  return rel_error(t, ref);
}

}  // namespace fold::test
