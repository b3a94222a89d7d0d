// The grid scale: exponents from the bounds, clamping, and invalid bounds.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/grid_scale.h"

namespace fold {
namespace {

TEST(GridScale, KeepsTheDqBoundUnder2To29AndDsUnder2To14) {
  for (float scale : {1e-20f, 1e-3f, 0.37f, 1.0f, 3.0f, 1e3f, 1e9f}) {
    const float bounds[4] = {2.5f * scale, 4.0f, 3.0f * scale, 7.0f};
    const GridScale g = grid_scale(bounds, 128);
    ASSERT_TRUE(g.valid);
    const double b_ds = 3.0 * scale * std::sqrt(128.0) * 4.0 + 7.0;
    const double b_dq = b_ds * 2.5 * scale;
    EXPECT_LT(b_dq * std::ldexp(1.0, g.s), std::ldexp(1.0, 29) * 1.0001);
    EXPECT_GE(b_dq * std::ldexp(1.0, g.s), std::ldexp(1.0, 27));  // not wastefully small
    EXPECT_LT(b_ds * std::ldexp(1.0, g.t), std::ldexp(1.0, 14) * 1.0001);
    EXPECT_GE(b_ds * std::ldexp(1.0, g.t), std::ldexp(1.0, 12));
  }
}

TEST(GridScale, ZeroBoundsAreValidAndClamped) {
  const float bounds[4] = {0, 0, 0, 0};
  const GridScale g = grid_scale(bounds, 64);
  EXPECT_TRUE(g.valid);
  EXPECT_EQ(g.s, 126);  // (2^-126, dQ's unscale, stays a normal float)
  EXPECT_EQ(g.t, 100);
}

TEST(GridScale, TinyBoundsScaleDqPastTwoToTheHundred) {
  // V ~ 1e-33 (session 31's audit): b_dq ~ 2^-109 wants s ~ 138; 126 keeps dQ's partials at
  // ~2^17 units instead of rounding them to 0 (s was clamped at 100).
  const float bounds[4] = {1.0f, 1e-33f, 8.0f, 1e-33f};  // max|K|, max|V|, max||dO||, max|D|
  const GridScale g = grid_scale(bounds, 64);
  EXPECT_TRUE(g.valid);
  EXPECT_EQ(g.s, 126);
  EXPECT_EQ(g.t, 100);  // b_ds ~ 6.5e-32 ~ 2^-103.6 wants t = 117: clamped
}

TEST(GridScale, UnderflowedDsBoundStillBoundsDq) {
  // dO and V tiny, K huge: b_dp = ||dO|| sqrt(D) max|V| rounds to 0 (or a subnormal) in float,
  // so the float b_dq said 0 and s went to 126, while the true b_dq (e.g. 8e-25 ~ 2^-80) needs
  // s ~ 109: the dQ partials could then reach 2^46 and overflow int32. b_dq's exponent comes
  // from double products there.
  for (float tiny : {1e-30f, 1e-25f, 3e-22f}) {
    for (float k : {1e20f, 1e30f, 1e35f}) {
      const float bounds[4] = {k, tiny, tiny, 0.0f};  // max|K|, max|V|, max||dO||, max|D|
      const GridScale g = grid_scale(bounds, 64);
      ASSERT_TRUE(g.valid);
      const double b_dq = static_cast<double>(tiny) * 8.0 * tiny * k;
      if (b_dq * std::ldexp(1.0, 126) < std::ldexp(1.0, 29)) {
        EXPECT_EQ(g.s, 126) << tiny << " " << k;  // the clamp binds: dQ keeps 2^-126 units
      } else {
        EXPECT_LT(b_dq * std::ldexp(1.0, g.s), std::ldexp(1.0, 29) * 1.0001) << tiny << " " << k;
        EXPECT_GE(b_dq * std::ldexp(1.0, g.s), std::ldexp(1.0, 27)) << tiny << " " << k;
      }
    }
  }
  // The float rule is kept wherever b_ds is a normal float (ordinary bounds keep their bits).
  const float ordinary[4] = {3.0f, 0.5f, 7.0f, 1.0f};
  const float b_ds = 7.0f * 8.0f * 0.5f + 1.0f;
  EXPECT_EQ(grid_scale(ordinary, 64).s, 29 - bound_exponent(b_ds * 3.0f));
}

TEST(GridScale, NonFiniteBoundsAreInvalid) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (int which = 0; which < 4; ++which)
    for (float bad : {nan, inf}) {
      float bounds[4] = {1, 1, 1, 1};
      bounds[which] = bad;
      EXPECT_FALSE(grid_scale(bounds, 64).valid) << which;
    }
  const float huge[4] = {3e38f, 3e38f, 3e38f, 3e38f};
  EXPECT_FALSE(grid_scale(huge, 64).valid);
}

TEST(GridScale, ScalePow2CoversTheKernelsRange) {
  // s - t, the dQ partials' exponent, spans [-200, 226] with s in [-100, 126] and t in
  // [-100, 100]; scale_pow2 is exact on [-252, 254] wherever the result is a normal float.
  const struct {
    float x;
    int k;
    double want;
  } cases[] = {{0x1p126f, -252, 0x1p-126},
               {0x1.8p100f, -200, 0x1.8p-100},
               {0x1.8p-100f, 226, 0x1.8p126},
               {0x1p-126f, 252, 0x1p126},
               {0x1p-127f, 254, 0x1p127}};
  for (const auto &c : cases) EXPECT_EQ(static_cast<double>(scale_pow2(c.x, c.k)), c.want) << c.k;
}

TEST(GridScale, ScalePow2IsExact) {
  for (int k = -200; k <= 200; k += 7) {
    const float x = 1.2345f;
    const float y = scale_pow2(x, k);
    if (k >= -126 && k <= 127) {
      EXPECT_EQ(static_cast<double>(y), std::ldexp(1.2345f, k)) << k;
    }
  }
}

}  // namespace
}  // namespace fold
