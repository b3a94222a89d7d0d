// The deterministic backward: accuracy against float64, integer-grid order invariance,
// grid bounds never exceeded, fp16 safety, and NaN propagation.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <ostream>

#include "core/grid_scale.h"
#include "cpu/reference.h"
#include "training_run.h"

namespace fold::test {
namespace {

struct BwdParam {
  Case c;
  const char *name;
};
// Names the case in test listings (instead of a byte dump of the struct).
void PrintTo(const BwdParam &param, std::ostream *os) { *os << param.name; }

class BackwardVsNaive : public ::testing::TestWithParam<BwdParam> {};

TEST_P(BackwardVsNaive, GradientsMatchFloat64) {
  Inputs in = make_inputs(GetParam().c, 7);
  Grads g = run(in);
  const Naive n = naive_attention(in.p, in.q, in.k, in.v, &in.dout);
  const bool f32 = in.c.dtype == FOLD_DTYPE_F32;
  // 16-bit: the reference rounds P and dS to the input dtype (as the tensor cores consume
  // them) and the result once more; a few times the one-rounding floor.
  auto bar = [&](const std::vector<double> &ref) {
    return f32 ? 2e-5 : 6.0 * rounding_floor(in.c.dtype, ref);
  };
  EXPECT_LT(rel_error(g.dq, n.dq), bar(n.dq));
  EXPECT_LT(rel_error(g.dk, n.dk), bar(n.dk));
  EXPECT_LT(rel_error(g.dv, n.dv), bar(n.dv));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, BackwardVsNaive,
    ::testing::Values(BwdParam{{{150, 1, 0, 64}, 4, 2, 64, FOLD_DTYPE_BF16, 1}, "bf16_causal_gqa"},
                      BwdParam{{{140, 20}, 2, 2, 128, FOLD_DTYPE_F16, 0}, "f16_mha_d128"},
                      BwdParam{{{100}, 3, 1, 96, FOLD_DTYPE_BF16, 1}, "bf16_mqa_d96"},
                      BwdParam{{{70}, 2, 1, 256, FOLD_DTYPE_BF16, 1}, "bf16_d256"},
                      BwdParam{{{90, 5}, 2, 1, 24, FOLD_DTYPE_F32, 1}, "f32_d24"}),
    [](const ::testing::TestParamInfo<BwdParam> &info) { return std::string(info.param.name); });

TEST(IntegerGrid, DqIsIdenticalUnderAnyTileOrder) {
  for (int dtype : {FOLD_DTYPE_BF16, FOLD_DTYPE_F16, FOLD_DTYPE_F32}) {
    Inputs in = make_inputs(Case{{300, 129}, 4, 2, 64, dtype, 1}, 11);
    const Grads base = run(in);
    for (uint64_t seed : {1, 2, 3}) {
      cpu::BackwardOrder key_order{seed, 0};
      const Grads a = run(in, &key_order);
      EXPECT_TRUE(same_bits(a.dq, base.dq)) << "key-block order, seed " << seed;
      // dK/dV of a key block never depend on other key blocks.
      EXPECT_TRUE(same_bits(a.dk, base.dk));
      EXPECT_TRUE(same_bits(a.dv, base.dv));
      cpu::BackwardOrder all_order{seed, seed * 17 + 1};
      const Grads b = run(in, &all_order);
      EXPECT_TRUE(same_bits(b.dq, base.dq)) << "tile order, seed " << seed;
    }
  }
}

// Control: the same partials summed in float in a different order do change bits, so the
// invariance above is the grid's doing (and the test above could fail).
TEST(IntegerGrid, FloatSumsOfTheSamePartialsAreOrderDependent) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> parts(64);
  for (float &x : parts)
    x = n(rng) * std::exp2(static_cast<float>(static_cast<int>(rng() % 20) - 10));
  int differing = 0;
  float forward_sum = 0.0f;
  for (float x : parts) forward_sum += x;
  for (int trial = 0; trial < 20; ++trial) {
    std::shuffle(parts.begin(), parts.end(), rng);
    float s = 0.0f;
    for (float x : parts) s += x;
    differing += s != forward_sum;
  }
  EXPECT_GT(differing, 0);
}

TEST(IntegerGrid, BoundsAreNeverExceeded) {
  struct Stress {
    Case c;
    float q_scale, do_scale;
  };
  // Random, peaked (large logits: softmax concentrates on one key), tiny and large values.
  const Stress cases[] = {{{{200, 64}, 4, 2, 64, FOLD_DTYPE_BF16, 1}, 1.0f, 1.0f},
                          {{{200}, 4, 1, 128, FOLD_DTYPE_BF16, 1}, 12.0f, 1.0f},
                          {{{150}, 2, 2, 64, FOLD_DTYPE_F16, 0}, 6.0f, 200.0f},
                          {{{150}, 2, 1, 64, FOLD_DTYPE_F16, 1}, 1.0f, 1e-4f},
                          {{{100}, 2, 1, 32, FOLD_DTYPE_F32, 1}, 3.0f, 1e6f}};
  for (const Stress &s : cases) {
    Inputs in = make_inputs(s.c, 3, s.q_scale, s.do_scale);
    cpu::BackwardStats stats;
    const Grads g = run(in, nullptr, &stats);
    EXPECT_LT(stats.max_abs_sum, std::ldexp(1.0, 30)) << "int32 grid would wrap";
    EXPECT_LT(stats.max_abs_partial, std::ldexp(1.0, 30));
    EXPECT_LT(stats.max_abs_ds, std::ldexp(1.0, 15)) << "dS * 2^t must stay far below fp16's max";
    EXPECT_GT(stats.max_abs_sum, std::ldexp(1.0, 16)) << "grid resolution wasted";
    for (int64_t i = 0; i < g.dq.size(); ++i) ASSERT_TRUE(std::isfinite(g.dq.get(i)));
    for (int64_t i = 0; i < g.dk.size(); ++i) ASSERT_TRUE(std::isfinite(g.dk.get(i)));
  }
}

TEST(IntegerGrid, HugeLogitsNeverBreakTheBounds) {
  // Logits of ~1e5..1e7 leave fp32 only ulps of room: the stored LSE can sit below a row's
  // largest recomputed logit. P is clamped to 1, so the int32 grid and the fp16 operand stay
  // in range and every gradient is finite (found by review: unclamped, dQ/dK/dV became inf).
  for (int dtype : {FOLD_DTYPE_F16, FOLD_DTYPE_BF16}) {
    for (float mag : {30.0f, 100.0f}) {
      Case c{{64}, 2, 1, 128, dtype, 1};
      Inputs in = make_inputs(c, 13, mag);
      for (int64_t i = 0; i < in.k.size(); ++i) in.k.set(i, in.k.get(i) * mag);
      cpu::BackwardStats stats;
      const Grads g = run(in, nullptr, &stats);
      EXPECT_LT(stats.max_abs_sum, std::ldexp(1.0, 30));
      EXPECT_LT(stats.max_abs_ds, std::ldexp(1.0, 15));
      for (const HostTensor *t : {&g.dq, &g.dk, &g.dv})
        for (int64_t i = 0; i < t->size(); ++i) ASSERT_TRUE(std::isfinite(t->get(i))) << mag;
    }
  }
}

TEST(IntegerGrid, Fp16LargeGradientsStayFiniteAndAccurate) {
  // dO large enough that unscaled dS (and P * 2^s) would overflow fp16.
  Inputs in = make_inputs(Case{{96}, 2, 1, 64, FOLD_DTYPE_F16, 1}, 9, 2.0f, 3000.0f);
  const Grads g = run(in);
  const Naive n = naive_attention(in.p, in.q, in.k, in.v, &in.dout);
  EXPECT_LT(rel_error(g.dq, n.dq), 6.0 * rounding_floor(FOLD_DTYPE_F16, n.dq));
  EXPECT_LT(rel_error(g.dk, n.dk), 6.0 * rounding_floor(FOLD_DTYPE_F16, n.dk));
}

TEST(IntegerGrid, NonFiniteInputGivesNanGradientsNotGarbage) {
  Inputs in = make_inputs(Case{{40, 30}, 2, 1, 32, FOLD_DTYPE_BF16, 1}, 4);
  in.dout.set(5 * 2 * 32 + 3, std::numeric_limits<float>::infinity());  // request 0
  const Grads g = run(in);
  // Request 0's dQ is NaN (its bounds are not finite); request 1 is untouched and finite.
  for (int64_t t = 0; t < 40; ++t) EXPECT_TRUE(std::isnan(g.dq.at(t, 0, 0)));
  for (int64_t t = 40; t < 70; ++t)
    for (int h = 0; h < 2; ++h) EXPECT_TRUE(std::isfinite(g.dq.at(t, h, 7)));
}

TEST(Backward, RepeatsAreBitIdentical) {
  Inputs in = make_inputs(Case{{257, 3}, 4, 2, 64, FOLD_DTYPE_BF16, 1}, 21);
  const Grads a = run(in), b = run(in);
  EXPECT_TRUE(same_bits(a.dq, b.dq) && same_bits(a.dk, b.dk) && same_bits(a.dv, b.dv));
}

TEST(Backward, RequestIsBitIdenticalAloneAndPackedAtAnOffset) {
  Inputs alone = make_inputs(Case{{190}, 4, 2, 64, FOLD_DTYPE_BF16, 1}, 31);
  Inputs packed = make_inputs(Case{{33, 190, 75}, 4, 2, 64, FOLD_DTYPE_BF16, 1}, 32);
  expect_alone_equals_packed(alone, packed, 33);
}

}  // namespace
}  // namespace fold::test
