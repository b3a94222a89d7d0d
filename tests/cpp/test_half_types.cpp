// The host 16-bit conversions must be exact inverses on every representable value and
// round to nearest even, as the GPU's cvt.rn does.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/half_types.h"

namespace fold {
namespace {

TEST(HalfTypes, Bf16RoundTripsEveryValue) {
  for (uint32_t u = 0; u < 65536; ++u) {
    const float x = to_float(bf16_t{static_cast<uint16_t>(u)});
    if (std::isnan(x)) continue;
    EXPECT_EQ(bf16_from_float(x).bits, u);
  }
}

TEST(HalfTypes, F16RoundTripsEveryValue) {
  for (uint32_t u = 0; u < 65536; ++u) {
    const float x = to_float(f16_t{static_cast<uint16_t>(u)});
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(to_float(f16_from_float(x))));
      continue;
    }
    EXPECT_EQ(f16_from_float(x).bits, u) << u;
  }
}

// Nearest-even against a brute-force choice between the two neighbours, in double.
template <class T>
void check_nearest(float x, int max_finite_bits) {
  const T r = from_float<T>(x);
  const double rx = to_float(r);
  if (std::isinf(rx)) {
    const double top = to_float(T{static_cast<uint16_t>(max_finite_bits)});
    EXPECT_GE(std::fabs(double(x)), top);
    return;
  }
  for (int delta : {-1, 1}) {
    const uint16_t nb = static_cast<uint16_t>(r.bits + delta);
    const double n = to_float(T{nb});
    if (std::isnan(n) || std::isinf(n) || ((nb ^ r.bits) & 0x8000)) continue;
    const double dr = std::fabs(rx - x), dn = std::fabs(n - x);
    EXPECT_LE(dr, dn) << x;
    if (dr == dn) {
      EXPECT_EQ(r.bits & 1, 0) << x;
    }
  }
}

TEST(HalfTypes, RoundsToNearestEven) {
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    float x;
    const uint32_t u = bits(rng);
    std::memcpy(&x, &u, 4);
    if (!std::isfinite(x)) continue;
    check_nearest<bf16_t>(x, 0x7f7f);
    if (std::fabs(x) < 1e6f) check_nearest<f16_t>(x, 0x7bff);
  }
  // fp16 subnormals and the overflow threshold.
  for (float x : {1e-7f, 3e-8f, 2.98e-8f, 6.1e-5f, 65504.0f, 65519.0f, 65520.0f, -65520.0f})
    check_nearest<f16_t>(x, 0x7bff);
  EXPECT_TRUE(std::isinf(to_float(f16_from_float(65520.0f))));
  EXPECT_EQ(to_float(f16_from_float(65519.0f)), 65504.0f);
}

}  // namespace
}  // namespace fold
