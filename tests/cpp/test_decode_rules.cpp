// The bit-exact rules of the decode (src/decode): E4M3 conversions, the Hadamard rotation,
// the two-plane quantisation, exp2/log2, the v8 exponent and the reference sample.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "decode/decode_plan.h"
#include "decode/e4m3.h"
#include "decode/planes.h"
#include "decode/reference_z.h"
#include "decode/v8_planes.h"

namespace {

using namespace fold::decode;

// All 256 codes, decoded independently of e4m3_to_float.
double e4m3_value(int code) {
  const int sign = code & 0x80, e = (code >> 3) & 15, m = code & 7;
  double v = e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
  return sign ? -v : v;
}

TEST(E4M3, DecodesEveryCode) {
  for (int c = 0; c < 256; ++c) {
    const float f = e4m3_to_float(static_cast<uint8_t>(c));
    if ((c & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(f)) << c;
      continue;
    }
    EXPECT_EQ(static_cast<double>(f), e4m3_value(c)) << c;
    EXPECT_EQ(e4m3_from_float(f), c == 0x80 ? 0x80 : c) << c;  // round trip, -0 kept
  }
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));
}

// Round to nearest even by brute force over the finite positive codes.
uint8_t e4m3_nearest(float x) {
  const double ax = std::fabs(static_cast<double>(x));
  int best = 0;
  double best_err = INFINITY;
  for (int c = 0; c <= 0x7e; ++c) {
    const double err = std::fabs(e4m3_value(c) - ax);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best | (std::signbit(x) ? 0x80 : 0));
}

TEST(E4M3, RoundsToNearestEvenAtEveryMidpoint) {
  std::vector<float> xs;
  for (int c = 0; c < 0x7e; ++c) {
    const double lo = e4m3_value(c), hi = e4m3_value(c + 1);
    const float mid = static_cast<float>((lo + hi) / 2);  // exact in float
    xs.insert(xs.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f),
                         static_cast<float>(lo), std::nextafter(static_cast<float>(lo), 1e9f)});
  }
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> u(-10.0f, 9.0f);
  for (int i = 0; i < 20000; ++i) xs.push_back(std::exp2(u(rng)) * (i % 2 ? 1.0f : -1.0f));
  for (float x : xs) {
    ASSERT_EQ(e4m3_from_float(x), e4m3_nearest(x)) << x;
    ASSERT_EQ(e4m3_from_float(-x), e4m3_nearest(-x)) << -x;
  }
}

TEST(E4M3, SaturatesAndKeepsNaN) {
  EXPECT_EQ(e4m3_from_float(448.0f), 0x7e);
  EXPECT_EQ(e4m3_from_float(463.9f), 0x7e);
  EXPECT_EQ(e4m3_from_float(1e30f), 0x7e);
  EXPECT_EQ(e4m3_from_float(-INFINITY), 0xfe);
  EXPECT_EQ(e4m3_from_float(NAN) & 0x7f, 0x7f);
  EXPECT_EQ(e4m3_from_float(std::ldexp(1.0f, -11)), 0x00);  // a quarter unit: to zero
  EXPECT_EQ(e4m3_from_float(std::ldexp(1.5f, -10)), 0x01);  // 0.75 unit rounds up
}

TEST(Hadamard, OrthonormalAfterScaling) {
  for (int n : {64, 128, 256}) {
    // Columns H e_i: H H^T = n I, exactly (small integers in fp32).
    std::vector<std::vector<float>> cols(n, std::vector<float>(n, 0.0f));
    for (int i = 0; i < n; ++i) {
      cols[i][i] = 1.0f;
      hadamard_unnormalised(cols[i].data(), n);
    }
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        double dot = 0;
        for (int d = 0; d < n; ++d) dot += cols[i][d] * cols[j][d];
        ASSERT_EQ(dot, i == j ? n : 0) << n << " " << i << " " << j;
      }
    // Applying it twice gives n x (exactly, for integer input).
    std::vector<float> x(n);
    for (int d = 0; d < n; ++d) x[d] = static_cast<float>(d % 7 - 3);
    std::vector<float> y = x;
    hadamard_unnormalised(y.data(), n);
    hadamard_unnormalised(y.data(), n);
    for (int d = 0; d < n; ++d) ASSERT_EQ(y[d], n * x[d]);
  }
}

TEST(Planes, ScaleRoundsUpAndNothingClips) {
  std::mt19937_64 rng(2);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> mag(-20.0f, 20.0f);
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = 64 << (trial % 3);
    std::vector<float> y(n);
    const float m = std::exp2(mag(rng));
    for (float &v : y) v = nd(rng) * m;
    if (trial % 5 == 0) y[trial % n] = 40 * m;  // an outlier sets the scale
    std::vector<int8_t> a(n), b(n);
    const uint16_t bits = quantise_row(y.data(), n, a.data(), b.data());
    const float scale = bf16_bits_to_float(bits);
    float amax = 0;
    for (float v : y) amax = std::max(amax, std::fabs(v));
    ASSERT_GE(static_cast<double>(scale) * 127, amax);                      // rounded up
    ASSERT_LE(static_cast<double>(scale), amax / 127.0 * (1 + 1.0 / 128));  // by < 1 bf16 ulp
    for (int d = 0; d < n; ++d) {
      ASSERT_GE(a[d], -127);
      ASSERT_LE(a[d], 127);
      ASSERT_GE(b[d], -127);
      ASSERT_LE(b[d], 127);
      const double rec = scale * (a[d] + b[d] / 256.0);
      // scale/512, except where |x - A| > 127.5/256 and B clamps at +-127: scale/256.
      const double bound = std::fabs(y[d] / scale - a[d]) > 127.5 / 256 ? 1.0 / 256 : 1.0 / 512;
      ASSERT_LE(std::fabs(rec - y[d]), scale * (bound + 1e-6)) << trial << " " << d;
    }
  }
  std::vector<float> zero(64, 0.0f);
  std::vector<int8_t> a(64, 1), b(64, 1);
  EXPECT_EQ(quantise_row(zero.data(), 64, a.data(), b.data()), 0);
  for (int d = 0; d < 64; ++d) EXPECT_EQ(a[d] | b[d], 0);
}

TEST(Planes, LogitsAreExactIntegerCombinations) {
  // sq = sk = 1, n = 64: coarse = (256 I_AA + I_BA) / 2^14, fine adds the plane-B terms.
  const float mc = logit_multiplier(1.0f, 1.0f, 8 + 6), mf = logit_multiplier(1.0f, 1.0f, 16 + 6);
  EXPECT_EQ(coarse_logit(1000, 300, mc), (256.0f * 1000 + 300) / 16384.0f);
  EXPECT_EQ(fine_logit(1000, 300, -20, 7, mf),
            static_cast<float>((65536.0 * 1000 + 256.0 * 280 + 7) / 4194304.0));
  EXPECT_EQ(rint_rne(2.5f), 2.0f);
  EXPECT_EQ(rint_rne(-3.5f), -4.0f);
  EXPECT_EQ(rint_rne(-0.4f), -0.0f);
}

TEST(Math, Exp2AndLog2AreAccurate) {
  double worst_e = 0, worst_l = 0;
  for (float x = -100.0f; x < 100.0f; x += 0.00731f) {
    const double e = exp2_fp(x), ref = std::exp2(static_cast<double>(x));
    worst_e = std::max(worst_e, std::fabs(e / ref - 1));
  }
  for (float x = 1e-30f; x < 1e30f; x *= 1.0137f) {
    worst_l = std::max(worst_l, std::fabs(log2_fp(x) - std::log2(static_cast<double>(x))) /
                                    std::max(1.0, std::fabs(std::log2(static_cast<double>(x)))));
  }
  EXPECT_LT(worst_e, 4e-7);
  EXPECT_LT(worst_l, 4e-7);
  EXPECT_EQ(exp2_fp(0.0f), 1.0f);
  EXPECT_EQ(exp2_fp(-200.0f), 0.0f);
  EXPECT_TRUE(std::isinf(exp2_fp(200.0f)));
  EXPECT_EQ(log2_fp(1.0f), 0.0f);
  EXPECT_EQ(log2_fp(1024.0f), 10.0f);
  EXPECT_TRUE(std::isinf(log2_fp(0.0f)) && log2_fp(0.0f) < 0);
  EXPECT_NEAR(log2_fp(std::ldexp(1.0f, -140)), -140.0f, 1e-5f);  // subnormal input
}

TEST(Math, Exp2SelectFormIsExp2Bitwise) {
  // exp2_fp_sel (split2's key weights, branch-free) must give exp2_fp's bits for every float,
  // NaN included (checked for all 2^32 when written): here the range ends, 0 and 127.5 with
  // their 64 neighbours on each side, and every 4093rd bit pattern (NaNs, infinities included).
  using fold::bits_to_float;
  using fold::float_to_bits;
  std::vector<uint32_t> us;
  for (const float e : {128.0f, -125.0f, 127.5f, 0.0f, -0.0f})
    for (uint32_t d = 0; d < 64; ++d) {
      us.push_back(float_to_bits(e) + d);
      us.push_back(float_to_bits(e) - d);
    }
  for (uint64_t u = 0; u < (1ull << 32); u += 4093) us.push_back(static_cast<uint32_t>(u));
  us.push_back(0x7f800000u);
  us.push_back(0xff800000u);
  us.push_back(0x7fc00000u);
  us.push_back(0xffffffffu);
  for (const uint32_t u : us) {
    const float x = bits_to_float(u);
    ASSERT_EQ(float_to_bits(exp2_fp_sel(x)), float_to_bits(exp2_fp(x))) << std::hex << u;
  }
}

TEST(V8, ExponentHeadroomAndSplitAccuracy) {
  EXPECT_EQ(v_exponent_for(1.0f), -6);
  EXPECT_EQ(v_exponent_for(1.5f), -5);
  EXPECT_EQ(v_exponent_for(64.0f), 0);
  std::mt19937_64 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int i = 0; i < 20000; ++i) {
    const float amax = std::exp2(static_cast<float>(i % 40 - 20)) * 1.3f;
    const int x = v_exponent_for(amax);
    ASSERT_LE(amax * std::exp2(-x), 64.0f);
    ASSERT_GT(amax * std::exp2(-x), 32.0f);
    const float v = std::max(-amax, std::min(amax, nd(rng) * amax / 3));
    uint8_t a, b;
    v8_split(v, x, a, b);
    const float full = v8_value(a, b, x, true), coarse = v8_value(a, b, x, false);
    // Both planes: within 2^-8 of |v| (plus the subnormal floor of plane B).
    ASSERT_LE(std::fabs(full - v), std::fabs(v) * std::exp2(-8.0f) + std::exp2(x - 12.0f)) << v;
    ASSERT_LE(std::fabs(coarse - v), std::fabs(v) * std::exp2(-4.0f) + std::exp2(x - 10.0f)) << v;
  }
  EXPECT_TRUE(v_fits(448.0f, 0));
  EXPECT_FALSE(v_fits(449.0f, 0));
}

TEST(ReferenceZ, SamplePlan) {
  ZSample z;
  plan_reference_sample(1, z);
  EXPECT_EQ(z.n, 1);
  plan_reference_sample(100, z);  // every key exact
  EXPECT_EQ(z.n, 100);
  EXPECT_EQ(z.first_stratum, 100);
  std::vector<int> seen(100, 0);
  for (int i = 0; i < z.n; ++i) seen[z.key[i]]++;
  for (int j = 0; j < 100; ++j) EXPECT_EQ(seen[j], 1);
  plan_reference_sample(10000, z);
  EXPECT_EQ(z.n, 1 + 63 + 128);
  EXPECT_EQ(z.key[0], 0);
  EXPECT_EQ(z.key[1], 10000 - 63);
  EXPECT_EQ(z.key[63], 9999);
  for (int i = z.first_stratum; i < z.n; ++i) {
    EXPECT_GE(z.key[i], 1);
    EXPECT_LT(z.key[i], 10000 - 63);
    if (i > z.first_stratum) {
      EXPECT_GT(z.key[i], z.key[i - 1]);
    }
  }
  EXPECT_FLOAT_EQ(z.stratum_weight, (10000 - 64 - 4) / 124.0f);
}

TEST(ReferenceZ, HeavyKeysAreScoredOnceAndExactly) {
  const int32_t heavy[kHeavyKeys] = {500, 7, 9990, 40, -1, -1, -1, -1};
  ZSample z;
  plan_reference_sample(10000, z, heavy);  // 9990 is among the newest: not repeated
  EXPECT_EQ(z.n, 1 + 63 + 3 + 128);
  std::vector<int> seen(10000, 0);
  for (int i = 0; i < z.n; ++i) seen[z.key[i]]++;
  for (int j : {0, 500, 7, 40, 9990}) EXPECT_EQ(seen[j], 1) << j;
  for (int i = z.first_stratum; i < z.n; ++i) EXPECT_FALSE(is_heavy(heavy, z.key[i]));
  plan_reference_sample(150, z, heavy);  // small: every key once, heavy ones included
  EXPECT_EQ(z.n, 150);
  std::vector<int> once(150, 0);
  for (int i = 0; i < z.n; ++i) once[z.key[i]]++;
  for (int j = 0; j < 150; ++j) EXPECT_EQ(once[j], 1) << j;
}

TEST(ReferenceZ, AWindowSamplesItsOwnKeys) {
  const int32_t heavy[kHeavyKeys] = {500, 7, 9990, 4000, 6200, -1, 4001, 2147483647};
  ZSample plain, w;
  // first = 0 is the plain sample, slot for slot.
  for (int32_t L : {1, 50, 150, 10000}) {
    plan_reference_sample(L, plain, heavy);
    plan_window_sample(L, 0, w, heavy);
    ASSERT_EQ(plain.n, w.n);
    EXPECT_EQ(plain.first_stratum, w.first_stratum);
    EXPECT_EQ(plain.stratum_weight, w.stratum_weight);
    for (int i = 0; i < w.n; ++i) EXPECT_EQ(plain.key[i], w.key[i]) << i;
  }
  // A window [first, L): the sample of L - first keys shifted by first; slot 0 is the window's
  // first key, heavy keys at or before it drop out, every key lies in the window.
  for (int32_t first : {1, 63, 4000, 9000, 9999}) {
    plan_window_sample(10000, first, w, heavy);
    int32_t shifted[kHeavyKeys];
    for (int i = 0; i < kHeavyKeys; ++i) shifted[i] = heavy[i] > first ? heavy[i] - first : -1;
    plan_reference_sample(10000 - first, plain, shifted);
    ASSERT_EQ(plain.n, w.n) << first;
    EXPECT_EQ(w.key[0], first);
    std::vector<int> seen(10000, 0);
    for (int i = 0; i < w.n; ++i) {
      EXPECT_EQ(w.key[i], plain.key[i] + first);
      EXPECT_GE(w.key[i], first);
      EXPECT_LT(w.key[i], 10000);
      seen[w.key[i]]++;
    }
    for (int j : {4000, 4001, 6200})
      if (j > first && j < 10000 - kZNewest) {
        EXPECT_EQ(seen[j], 1) << first << " " << j;
      }
  }
}

TEST(FpRules, Log2AddExp2) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {-300.0f, -7.25f, 0.0f, 3.5f, 100.0f}) {
    EXPECT_EQ(log2_add_exp2(x, -inf), x);  // no sink: the bits of x
    EXPECT_NEAR(log2_add_exp2(x, x), x + 1.0f, 1e-5f);
    EXPECT_NEAR(log2_add_exp2(x, x + 30.0f), x + 30.0f, 1e-5f);
    EXPECT_NEAR(log2_add_exp2(x, x - 2.0f), x + std::log2(1.25f), 1e-5f);
    EXPECT_EQ(log2_add_exp2(x, x + 200.0f), x + 200.0f);  // no overflow: 2^(s - m) = 1
  }
}

TEST(ReferenceZ, ParallelPlacementEqualsTheSerialPlan) {
  // The CUDA front places every slot independently (sample_shape from the heavy list's masks,
  // then one thread per newest key, heavy entry, middle key or stratum); it must build the serial
  // plan exactly. The masks here by heavy_masks' loops (the front takes them by warp votes; the
  // GPU test test_decode_front_sample_heavy_lists_match_cpu holds those to the CPU's bits).
  std::mt19937 rng(5);
  for (int32_t L : {1, 2, 50, 63, 64, 65, 100, 150, 192, 193, 194, 300, 1000, 4097, 32768}) {
    for (int trial = 0; trial < 40; ++trial) {
      int32_t heavy[kHeavyKeys];
      for (int i = 0; i < kHeavyKeys; ++i) {
        const int kind = static_cast<int>(rng() % 6);
        heavy[i] = kind == 0            ? -1
                   : kind == 1          ? L + static_cast<int32_t>(rng() % 5)  // hand-made: >= L
                   : kind == 2 && i > 0 ? heavy[i - 1]                         // duplicate
                                        : static_cast<int32_t>(rng() % static_cast<uint32_t>(L));
      }
      const int32_t *h = trial == 0 ? nullptr : heavy;
      ZSample ref;
      plan_reference_sample(L, ref, h);
      unsigned valid = 0u, distinct = 0u;
      heavy_masks(h, sample_newest_lo(L), valid, distinct);
      const ZSampleShape s = sample_shape(L, valid, distinct);
      ASSERT_EQ(s.n, ref.n) << L;
      std::vector<int32_t> key(ref.n, -2);
      key[0] = 0;
      for (int i = 0; i < s.n_newest; ++i) key[1 + i] = s.newest_lo + i;
      for (int e = 0; e < kHeavyKeys; ++e)
        if (((valid >> e) & 1u) != 0u) key[sample_heavy_slot(s, e)] = h[e];
      if (s.m <= kZStrata) {
        ASSERT_EQ(ref.first_stratum, ref.n);
        for (int32_t j = 1; j < s.newest_lo; ++j) {
          const int slot = sample_exact_middle_slot(s, h, j);
          if (slot >= 0) key[slot] = j;
        }
      } else {
        ASSERT_EQ(ref.first_stratum, s.first_middle);
        for (int i = 0; i < kZStrata; ++i) key[s.first_middle + i] = sample_stratum_key(s, h, i);
      }
      for (int i = 0; i < ref.n; ++i) ASSERT_EQ(key[i], ref.key[i]) << L << " slot " << i;
    }
  }
}

TEST(ReferenceZ, RanksUseTheUnweightedValues) {
  // The top four stratum samples by their unweighted values keep weight 1. The first
  // stratum slot (0.9) is weighted; that must not push it above the four 1.0 samples that
  // follow it (the sequential v0 rule did: it ranked later slots against weighted ones).
  ZSample z;
  plan_reference_sample(10000, z);
  std::vector<float> s(z.n, -60.0f);
  s[0] = 0.0f;
  const int f = z.first_stratum;
  s[f] = std::log2(0.9f);
  for (int i = 1; i <= 4; ++i) s[f + 10 * i] = 0.0f;
  s[f + 60] = std::log2(0.95f);
  const double w = (10000 - 64 - 4) / 124.0;
  EXPECT_NEAR(reference_z(z, s.data()), std::log2(1 + 4 + w * (0.9 + 0.95)), 1e-5);
}

TEST(ReferenceZ, EstimatesTheLse) {
  // Flat logits: Z equals log2(L) + s within a small fraction of a binade.
  ZSample z;
  const int L = 20000;
  plan_reference_sample(L, z);
  std::vector<float> s(z.n, 3.0f);
  EXPECT_NEAR(reference_z(z, s.data()), 3.0 + std::log2(static_cast<double>(L)), 0.01);
  // A heavy key hit by a stratum sample counts once: Z near log2(2^20 + L), not stride x.
  std::vector<float> h(z.n, 0.0f);
  h[z.first_stratum + 50] = 20.0f;
  EXPECT_NEAR(reference_z(z, h.data()), std::log2(std::exp2(20.0) + L), 0.01);
  // Small requests: Z is the exact LSE.
  plan_reference_sample(50, z);
  std::vector<float> e(z.n);
  double sum = 0;
  for (int i = 0; i < z.n; ++i) sum += std::exp2(e[i] = static_cast<float>(i % 9) * 0.7f - 2);
  EXPECT_NEAR(reference_z(z, e.data()), std::log2(sum), 1e-5);
}

// Where a depth's screen runs (decode_plan.h): bf16 / fp16 values at D 128 up to G 8 and at D 64
// up to G 4; v8 caches never at D 64 / 128 (the dense ring reads them on the tensor cores, their
// screen is the fma split); D 256 always. Elsewhere the step reads every key.
TEST(Planner, ScreenRunsWhereItPays) {
  for (int g = 1; g <= 64; ++g) {
    EXPECT_EQ(screen_pays(g, 128, false), g <= 8) << g;
    EXPECT_EQ(screen_pays(g, 64, false), g <= 4) << g;
    EXPECT_TRUE(screen_pays(g, 256, false)) << g;
    EXPECT_FALSE(screen_pays(g, 64, true)) << g;
    EXPECT_FALSE(screen_pays(g, 128, true)) << g;
    EXPECT_TRUE(screen_pays(g, 256, true)) << g;
  }
}

}  // namespace
