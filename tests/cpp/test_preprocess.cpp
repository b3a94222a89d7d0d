// The preprocess follows its specification exactly: Delta in the canonical order, bounds
// as maxima. (The GPU preprocess is compared to this, bit for bit, on the H200.)
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/float_bits.h"
#include "core/row_reduce.h"
#include "cpu/reference.h"
#include "test_util.h"

namespace fold::test {
namespace {

TEST(CanonicalDot, IsTheDocumentedOrder) {
  // D = 24: three chunks in W = 4 lanes: ((c0 + c2) + (c1 + 0)), each chunk an fma chain.
  std::mt19937_64 rng(3);
  std::normal_distribution<float> n;
  std::vector<float> a(24), b(24);
  for (int i = 0; i < 24; ++i) a[i] = n(rng), b[i] = n(rng);
  float c[4] = {0, 0, 0, 0};
  for (int ch = 0; ch < 3; ++ch)
    for (int e = 0; e < 8; ++e) c[ch] = std::fma(a[ch * 8 + e], b[ch * 8 + e], c[ch]);
  const float expect = (c[0] + c[2]) + (c[1] + c[3]);
  const float got = canonical_dot(
      24, [&](int d) { return a[d]; }, [&](int d) { return b[d]; });
  EXPECT_EQ(float_to_bits(got), float_to_bits(expect));
  EXPECT_EQ(reduce_lanes(256), 32);
  EXPECT_EQ(reduce_lanes(64), 8);
  EXPECT_EQ(reduce_lanes(72), 16);
  EXPECT_EQ(reduce_lanes(8), 1);
}

TEST(Preprocess, DeltaAndBoundsMatchTheirDefinitions) {
  Case c{{50, 0, 1, 31}, 6, 2, 40, FOLD_DTYPE_BF16, 1};
  const auto cu = offsets(c.lengths);
  const fold_attn_problem_t p = packed_problem(c, cu);
  std::mt19937_64 rng(8);
  HostTensor k(c.dtype, p.total_tokens, 2, 40), v(c.dtype, p.total_tokens, 2, 40),
      o(c.dtype, p.total_tokens, 6, 40), d(c.dtype, p.total_tokens, 6, 40);
  k.fill_normal(rng, 2.0f);
  v.fill_normal(rng);
  o.fill_normal(rng);
  d.fill_normal(rng, 0.5f);
  std::vector<float> delta(static_cast<size_t>(p.total_tokens * 6), -1.0f),
      bounds(4 * 2 * 4, -1.0f);
  cpu::bwd_preprocess(p, k.view(), v.view(), o.view(), d.view(), delta.data(), bounds.data());
  for (int b = 0; b < p.batch; ++b)
    for (int hk = 0; hk < 2; ++hk) {
      float mk = 0, mv = 0, mdo = 0, mdl = 0;
      for (int64_t t = cu[b]; t < cu[b + 1]; ++t) {
        for (int e = 0; e < 40; ++e) {
          mk = std::max(mk, std::fabs(k.at(t, hk, e)));
          mv = std::max(mv, std::fabs(v.at(t, hk, e)));
        }
        for (int h = hk * 3; h < hk * 3 + 3; ++h) {
          const float dl = canonical_dot(
              40, [&](int e) { return d.at(t, h, e); }, [&](int e) { return o.at(t, h, e); });
          const float nrm = canonical_norm(40, [&](int e) { return d.at(t, h, e); });
          EXPECT_EQ(float_to_bits(delta[h * p.total_tokens + t]), float_to_bits(dl));
          mdo = std::max(mdo, nrm);
          mdl = std::max(mdl, std::fabs(dl));
        }
      }
      const float *bd = &bounds[(b * 2 + hk) * 4];
      EXPECT_EQ(bd[FOLD_BOUND_MAX_ABS_K], mk);
      EXPECT_EQ(bd[FOLD_BOUND_MAX_ABS_V], mv);
      EXPECT_EQ(bd[FOLD_BOUND_MAX_DO_NORM], mdo);
      EXPECT_EQ(bd[FOLD_BOUND_MAX_ABS_DELTA], mdl);
    }
  // The empty request has zero bounds.
  EXPECT_EQ(bounds[(1 * 2 + 0) * 4 + 0], 0.0f);
}

TEST(Preprocess, NanIsCanonicalAndPropagatesToTheBounds) {
  Case c{{4}, 2, 1, 16, FOLD_DTYPE_F32, 0};
  const auto cu = offsets(c.lengths);
  const fold_attn_problem_t p = packed_problem(c, cu);
  HostTensor k(c.dtype, 4, 1, 16), v(c.dtype, 4, 1, 16), o(c.dtype, 4, 2, 16), d(c.dtype, 4, 2, 16);
  std::mt19937_64 rng(1);
  k.fill_normal(rng);
  v.fill_normal(rng);
  o.fill_normal(rng);
  d.fill_normal(rng);
  o.set(1 * 32 + 5, bits_to_float(0x7fa00001u));  // a NaN with a payload
  std::vector<float> delta(8), bounds(4);
  cpu::bwd_preprocess(p, k.view(), v.view(), o.view(), d.view(), delta.data(), bounds.data());
  EXPECT_EQ(float_to_bits(delta[0 * 4 + 1]), kCanonicalNaN);
  EXPECT_EQ(float_to_bits(bounds[FOLD_BOUND_MAX_ABS_DELTA]), kCanonicalNaN);
  EXPECT_TRUE(std::isfinite(bounds[FOLD_BOUND_MAX_DO_NORM]));
}

TEST(Preprocess, TheNormIsThePlainOneOnOrdinaryRowsAndFiniteOnExtremeOnes) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal;
  for (int D : {40, 64, 128, 256}) {
    std::vector<float> x(D);
    for (float &e : x) e = normal(rng);
    const auto at = [&](int d) { return x[d]; };
    // Ordinary rows: bit for bit the square root of the plain sum of squares (the bound that
    // was stored before the norm was scaled, so the backward's grid is unchanged).
    EXPECT_EQ(float_to_bits(canonical_norm(D, at)),
              float_to_bits(std::sqrt(canonical_dot(D, at, at))));
    // A row whose squares overflow float32, and one whose squares underflow: the norm stays
    // within rounding of the exact one.
    for (float scale : {1e19f, 1e30f, 1e-25f, 1e-38f}) {
      std::vector<float> y(D);
      for (int d = 0; d < D; ++d) y[d] = x[d] * scale;
      double exact = 0;  // of the stored (possibly subnormal) elements
      for (float e : y) exact += static_cast<double>(e) * e;
      exact = std::sqrt(exact);
      const float n = canonical_norm(D, [&](int d) { return y[d]; });
      ASSERT_TRUE(std::isfinite(n)) << D << " " << scale;
      EXPECT_NEAR(n / exact, 1.0, 1e-5) << D << " " << scale;
    }
  }
  std::vector<float> zero(64, 0.0f);
  EXPECT_EQ(canonical_norm(64, [&](int d) { return zero[d]; }), 0.0f);
}

}  // namespace
}  // namespace fold::test
