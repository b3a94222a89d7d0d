// Test helpers shared by the decode tests: a host cache in C ABI buffers, synthetic requests with
// heavy logit tails and offset V, float64 attention over them, and one CPU step.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "core/half_types.h"
#include "decode/decode_cpu.h"
#include "fold_attention/decode.h"

namespace fold::test::dec {

using fold::bf16_t;
using fold::to_float;

struct Cache {
  int B, Hk, D, P, max_len, page = 64, ppr;
  int pinned = 0;  // fold_kvcache_t::pinned_window
  bool v8;
  std::vector<int8_t> ka, kb;
  std::vector<uint16_t> ks;
  std::vector<bf16_t> v;
  std::vector<uint8_t> va, vb;
  std::vector<int32_t> vexp, pt, len;
  std::vector<float> psum;
  std::vector<int32_t> heavy;
  int next_page = 0;

  Cache(int batch, int hk, int d, int maxlen, bool v8_ = false, int spare_pages = 0)
      : B(batch), Hk(hk), D(d), max_len(maxlen), v8(v8_) {
    ppr = (max_len + page - 1) / page;
    P = B * ppr + spare_pages;
    const size_t n = static_cast<size_t>(P) * Hk * page * D;
    ka.assign(n, 0);
    kb.assign(n, 0);
    ks.assign(n / D, 0);
    if (v8) {
      va.assign(n, 0);
      vb.assign(n, 0);
    } else {
      v.assign(n, bf16_t{0});
    }
    vexp.assign(static_cast<size_t>(B) * Hk, FOLD_DECODE_V_EXP_UNSET);
    psum.assign(static_cast<size_t>(P) * Hk * D, 0.0f);
    heavy.assign(static_cast<size_t>(B) * Hk * FOLD_DECODE_HEAVY_KEYS, -1);
    pt.assign(static_cast<size_t>(B) * ppr, -1);
    len.assign(B, -1);
  }
  fold_kvcache_t desc() {
    fold_kvcache_t c{};
    c.batch = B;
    c.n_kv_heads = Hk;
    c.head_dim = D;
    c.page_size = page;
    c.max_len = max_len;
    c.pages_per_request = ppr;
    c.num_pages = P;
    c.dtype = FOLD_DTYPE_BF16;
    c.v8 = v8;
    c.k_a = ka.data();
    c.k_b = kb.data();
    c.k_scale = ks.data();
    c.v = v8 ? nullptr : v.data();
    c.v_a = v8 ? va.data() : nullptr;
    c.v_b = v8 ? vb.data() : nullptr;
    c.v_exp = vexp.data();
    c.v_page_sum = psum.data();
    c.heavy_keys = heavy.data();
    c.page_table = pt.data();
    c.lengths = len.data();
    c.pinned_window = pinned;
    return c;
  }
  // Activates slot b and appends k, v ([n][Hk][D] floats, rounded to bf16).
  void fill(int b, const std::vector<float> &k, const std::vector<float> &vv, int n) {
    len[b] = 0;
    for (int i = 0; i < ppr; ++i) pt[static_cast<size_t>(b) * ppr + i] = next_page++;
    std::vector<bf16_t> kh(k.size()), vh(vv.size());
    for (size_t i = 0; i < k.size(); ++i) kh[i] = fold::bf16_from_float(k[i]);
    for (size_t i = 0; i < vv.size(); ++i) vh[i] = fold::bf16_from_float(vv[i]);
    fold_kvcache_t c = desc();
    ASSERT_EQ(fold_kvcache_append_cpu(&c, b, n, fold_tensor_t{kh.data(), 0, Hk * D, D},
                                      fold_tensor_t{vh.data(), 0, Hk * D, D}),
              FOLD_OK)
        << fold_last_error();
  }
};

// Keys with a heavy tail along a direction u the queries favour; values offset from zero.
struct Data {
  std::vector<float> q, k, v;  // q [H][D], k/v [L][Hk][D]
};
inline Data make_data(int L, int H, int Hk, int D, uint64_t seed, float tail = 3.0f,
                      float offset = 2.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::exponential_distribution<float> ex(1.0f);
  std::vector<float> u(static_cast<size_t>(Hk) * D);
  for (int h = 0; h < Hk; ++h) {
    double norm = 0;
    for (int d = 0; d < D; ++d) norm += std::pow(u[h * D + d] = nd(rng), 2);
    for (int d = 0; d < D; ++d) u[h * D + d] /= static_cast<float>(std::sqrt(norm));
  }
  Data x;
  x.k.resize(static_cast<size_t>(L) * Hk * D);
  x.v.resize(x.k.size());
  for (int j = 0; j < L; ++j)
    for (int h = 0; h < Hk; ++h) {
      const float a = tail * std::pow(ex(rng), 1.5f);
      for (int d = 0; d < D; ++d) {
        x.k[(static_cast<size_t>(j) * Hk + h) * D + d] = nd(rng) + a * u[h * D + d];
        x.v[(static_cast<size_t>(j) * Hk + h) * D + d] = nd(rng) + offset;
      }
    }
  const int G = H / Hk;
  x.q.resize(static_cast<size_t>(H) * D);
  for (int h = 0; h < H; ++h)
    for (int d = 0; d < D; ++d) x.q[h * D + d] = 0.5f * nd(rng) + 2.0f * u[(h / G) * D + d];
  return x;
}

inline float bf(float x) { return to_float(fold::bf16_from_float(x)); }

// Float64 attention of one request (bf16-rounded inputs): out [H][D], lse [H] (natural).
// Float64 attention of one request (bf16-rounded inputs) over its keys [first, L), with
// optional sinks (natural logits per head, in the denominator only): out [H][D], lse [H].
inline void reference(const Data &x, int L, int H, int Hk, int D, std::vector<double> &out,
                      std::vector<double> &lse, int first = 0, const float *sinks = nullptr) {
  const int G = H / Hk;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  out.assign(static_cast<size_t>(H) * D, 0.0);
  lse.assign(H, 0.0);
  for (int h = 0; h < H; ++h) {
    std::vector<double> s(L);
    double m = sinks != nullptr ? double(sinks[h]) : -INFINITY;
    for (int j = first; j < L; ++j) {
      double acc = 0;
      for (int d = 0; d < D; ++d)
        acc += double(bf(x.q[h * D + d])) * bf(x.k[(static_cast<size_t>(j) * Hk + h / G) * D + d]);
      m = std::max(m, s[j] = acc * scale);
    }
    double sum = sinks != nullptr ? std::exp(double(sinks[h]) - m) : 0.0;
    for (int j = first; j < L; ++j) sum += std::exp(s[j] - m);
    lse[h] = m + std::log(sum);
    for (int j = first; j < L; ++j) {
      const double p = std::exp(s[j] - lse[h]);
      for (int d = 0; d < D; ++d)
        out[h * D + d] += p * bf(x.v[(static_cast<size_t>(j) * Hk + h / G) * D + d]);
    }
  }
}

struct Step {
  std::vector<bf16_t> out;
  std::vector<float> lse;
  fold_decode_stats_t stats{};
};

inline fold_decode_params_t params(int H, float depth) {
  fold_decode_params_t p{};
  p.n_heads = H;
  p.dense = depth <= 0 ? 1 : 0;
  p.depth = depth;
  p.softmax_scale = 0;  // set by caller
  p.refine_band = 8.0f;
  p.v_refine_band = 10.0f;
  return p;
}

// q for all B slots: slot b gets qs[b] (or zeros).
// One step over the cache (no append). window_before and sinks as in fold_decode_params_t.
inline Step run(Cache &c, int H, const std::vector<std::vector<float>> &qs, float depth,
                const fold::cpu::DecodeHooks *hooks = nullptr, int32_t window_before = 0,
                const float *sinks = nullptr) {
  const int D = c.D;
  std::vector<bf16_t> q(static_cast<size_t>(c.B) * H * D, bf16_t{0});
  for (int b = 0; b < c.B && b < static_cast<int>(qs.size()); ++b)
    for (size_t i = 0; i < qs[b].size(); ++i) q[b * H * D + i] = fold::bf16_from_float(qs[b][i]);
  Step s;
  s.out.assign(q.size(), bf16_t{0});
  s.lse.assign(static_cast<size_t>(c.B) * H, 0.0f);
  fold_decode_params_t p = params(H, depth);
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(D));
  p.window_before = window_before;
  p.sinks = sinks;
  fold_kvcache_t desc = c.desc();
  const fold_tensor_t qt{q.data(), static_cast<int64_t>(H) * D, 0, D};
  const fold_tensor_t ot{s.out.data(), static_cast<int64_t>(H) * D, 0, D};
  if (hooks) {
    fold::cpu::decode_attend(desc, p, qt, ot, s.lse.data(), &s.stats, hooks);
  } else {
    const fold_tensor_t none{nullptr, 0, 0, 0};
    EXPECT_EQ(fold_decode_cpu(&desc, &p, qt, none, none, ot, s.lse.data(), &s.stats), FOLD_OK)
        << fold_last_error();
  }
  return s;
}

inline double rel_err(const Step &s, int b, int H, int D, const std::vector<double> &ref) {
  double num = 0, den = 0;
  for (int i = 0; i < H * D; ++i) {
    const double d = to_float(s.out[b * H * D + i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

inline double floor_err(const std::vector<double> &ref) {
  double num = 0, den = 0;
  for (double r : ref) {
    num += std::pow(bf(static_cast<float>(r)) - r, 2);
    den += r * r;
  }
  return std::sqrt(num / den);
}

}  // namespace fold::test::dec
