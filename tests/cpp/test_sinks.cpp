// Attention sinks (fold_attn_problem_t.sinks) in the CPU reference: the forward against a
// float64 attention with the sink in the denominator, the backward's gradients from the forward's
// LSE (the backward reads no sink), the sinks' gradient from the preprocess's Delta, and a sink
// of -inf changing no bit.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "cpu/reference.h"
#include "training_run.h"

namespace fold::test {
namespace {

// The forward and backward (training_run.h), then Delta from the preprocess for d sinks.
struct Result {
  Grads g;
  std::vector<float> delta;
};

Result run_with_delta(Inputs &in) {
  Result r{run(in), std::vector<float>(static_cast<size_t>(in.p.total_tokens * in.p.n_heads))};
  std::vector<float> bounds(static_cast<size_t>(in.p.batch) * in.p.n_kv_heads * FOLD_BWD_BOUNDS);
  cpu::bwd_preprocess(in.p, in.k.view(), in.v.view(), r.g.out.view(), in.dout.view(),
                      r.delta.data(), bounds.data());
  return r;
}

Inputs make(const Case &c, uint64_t seed) { return make_inputs(c, seed, 1.5f, 1.0f, 1.5f); }

// Sinks below, around and above the rows' largest logits (|s| ~ 2-5 here).
const float kSinks[4] = {-3.0f, 0.5f, 2.5f, 8.0f};

TEST(Sinks, ForwardBackwardAndSinkGradientMatchFloat64) {
  for (int dtype : {FOLD_DTYPE_F32, FOLD_DTYPE_BF16}) {
    for (int causal : {1, 0}) {
      Case c{{150, 1, 70}, 4, 2, 64, dtype, causal};
      Inputs in = make(c, 3);
      in.p.sinks = kSinks;
      const fold_attn_problem_t &p = in.p;
      const Result res = run_with_delta(in);
      const Grads &r = res.g;
      const Naive n = naive_attention(p, in.q, in.k, in.v, &in.dout);
      const bool f32 = dtype == FOLD_DTYPE_F32;
      auto bar = [&](const std::vector<double> &ref, double times) {
        return f32 ? 2e-5 : times * rounding_floor(dtype, ref);
      };
      EXPECT_LT(rel_error(r.out, n.out), bar(n.out, 3.0));
      EXPECT_LT(rel_error(r.dq, n.dq), bar(n.dq, 6.0));
      EXPECT_LT(rel_error(r.dk, n.dk), bar(n.dk, 6.0));
      EXPECT_LT(rel_error(r.dv, n.dv), bar(n.dv, 6.0));
      double worst = 0;
      for (int64_t t = 0; t < p.total_tokens; ++t)
        for (int h = 0; h < c.n_heads; ++h)
          worst = std::max(worst, std::fabs(r.lse[h * p.total_tokens + t] - n.lse[t * 4 + h]));
      EXPECT_LT(worst, 1e-4);
      // d sinks[h] = -sum_i exp(sinks[h] - lse_i) Delta_i, from the stored LSE and Delta.
      for (int h = 0; h < c.n_heads; ++h) {
        double ds = 0;
        for (int64_t t = 0; t < p.total_tokens; ++t)
          ds -= std::exp(double(kSinks[h]) - r.lse[h * p.total_tokens + t]) *
                res.delta[h * p.total_tokens + t];
        EXPECT_NEAR(ds, n.dsinks[h], (f32 ? 1e-4 : 2e-2) * (1.0 + std::fabs(n.dsinks[h])))
            << "head " << h << " dtype " << dtype << " causal " << causal;
      }
    }
  }
}

// A sink of -inf has no mass: every output bit is that of no sink.
TEST(Sinks, MinusInfinityChangesNoBit) {
  Case c{{130, 40}, 4, 1, 64, FOLD_DTYPE_BF16, 1};
  Inputs in = make(c, 4);
  const Grads plain = run(in);
  const float none[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
  in.p.sinks = none;
  const Grads sunk = run(in);
  EXPECT_EQ(plain.out.bytes, sunk.out.bytes);
  EXPECT_EQ(plain.lse, sunk.lse);
  EXPECT_EQ(plain.dq.bytes, sunk.dq.bytes);
  EXPECT_EQ(plain.dk.bytes, sunk.dk.bytes);
  EXPECT_EQ(plain.dv.bytes, sunk.dv.bytes);
}

// A sink far above every logit takes almost all the mass: the outputs shrink toward 0, stay
// finite, and the LSE follows the sink.
TEST(Sinks, ALargeSinkTakesTheMass) {
  Case c{{64}, 2, 2, 64, FOLD_DTYPE_F32, 1};
  Inputs in = make(c, 5);
  const float big[2] = {60.0f, 60.0f};
  in.p.sinks = big;
  const Grads r = run(in);
  for (int64_t i = 0; i < r.out.size(); ++i) {
    ASSERT_TRUE(std::isfinite(r.out.get(i)));
    ASSERT_LT(std::fabs(r.out.get(i)), 1e-12f);
  }
  for (float x : r.lse) EXPECT_NEAR(x, 60.0f, 1e-3f);
}

TEST(Sinks, MisalignedSinksAreRejected) {
  Case c{{8}, 2, 2, 64, FOLD_DTYPE_BF16, 1};
  const auto cu = offsets(c.lengths);
  fold_attn_problem_t p = packed_problem(c, cu);
  alignas(8) unsigned char raw[16] = {};
  p.sinks = reinterpret_cast<const float *>(raw + 2);
  EXPECT_EQ(fold_check_problem(&p, 1), FOLD_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fold_last_error()).find("sinks"), std::string::npos);
}

}  // namespace
}  // namespace fold::test
