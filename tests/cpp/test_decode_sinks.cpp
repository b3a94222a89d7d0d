// Attention sinks in the decode CPU reference (fold_decode_params_t.sinks, gpt-oss): one logit
// per query head whose exp joins the row's denominator, with no value. Accuracy against float64
// from sinks far below the keys' mass to sinks that outweigh it, -inf sinks keep the bits of no
// sinks, sinks with a window, the guard's recomputation, validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "decode_run.h"
#include "fold_attention/decode.h"

namespace {

using namespace fold::test::dec;

// The natural LSE of each head over the keys [first, L) (float64), to place sinks around.
std::vector<double> key_lse(const Data &x, int L, int H, int Hk, int D, int first = 0) {
  std::vector<double> out, lse;
  reference(x, L, H, Hk, D, out, lse, first);
  return lse;
}

// Relative error against ref with an absolute part for outputs a dominant sink shrinks: the
// bf16 rounding of the output relative to the output itself, plus 1e-6.
void expect_close(const Step &s, int H, int D, const std::vector<double> &ref,
                  const std::vector<double> &lse, const std::string &what) {
  const double floor = floor_err(ref);
  EXPECT_LT(rel_err(s, 0, H, D, ref), 2.0 * floor + 1e-6) << what;
  for (int h = 0; h < H; ++h) EXPECT_NEAR(s.lse[h], lse[h], 1e-3) << what << " head " << h;
  for (size_t i = 0; i < s.out.size(); ++i) ASSERT_TRUE(std::isfinite(to_float(s.out[i])));
}

TEST(DecodeSinks, AccuracyAgainstFloat64) {
  const int L = 1200, H = 8, Hk = 2, D = 64;
  const Data x = make_data(L, H, Hk, D, 81);
  const std::vector<double> base = key_lse(x, L, H, Hk, D);
  for (bool v8 : {false, true}) {
    Cache c(1, Hk, D, 1280, v8);
    c.fill(0, x.k, x.v, L);
    // The sink relative to the keys' LSE: negligible, comparable, dominant, overwhelming.
    for (double delta : {-30.0, -2.0, 0.0, 3.0, 12.0, 80.0}) {
      std::vector<float> sinks(H);
      for (int h = 0; h < H; ++h) sinks[h] = static_cast<float>(base[h] + delta + 0.37 * h);
      std::vector<double> ref, lse;
      reference(x, L, H, Hk, D, ref, lse, 0, sinks.data());
      for (float depth : {0.0f, 16.0f}) {
        const Step s = run(c, H, {x.q}, depth, nullptr, 0, sinks.data());
        expect_close(s, H, D, ref, lse,
                     "v8 " + std::to_string(v8) + " delta " + std::to_string(delta) + " depth " +
                         std::to_string(depth));
        EXPECT_EQ(s.stats.fixup_rows, 0) << delta;  // Z takes the sink: no recomputation
      }
    }
  }
}

TEST(DecodeSinks, MinusInfinitySinksKeepTheBitsOfNoSinks) {
  const int L = 900, H = 6, Hk = 3, D = 128;
  const Data x = make_data(L, H, Hk, D, 82);
  Cache c(1, Hk, D, 1024);
  c.fill(0, x.k, x.v, L);
  const std::vector<float> sinks(H, -std::numeric_limits<float>::infinity());
  for (float depth : {0.0f, 16.0f})
    for (int w : {0, 300}) {
      const Step none = run(c, H, {x.q}, depth, nullptr, w);
      const Step s = run(c, H, {x.q}, depth, nullptr, w, sinks.data());
      ASSERT_EQ(std::memcmp(none.out.data(), s.out.data(), none.out.size() * 2), 0);
      ASSERT_EQ(std::memcmp(none.lse.data(), s.lse.data(), none.lse.size() * 4), 0);
    }
}

TEST(DecodeSinks, WithAWindow) {
  // gpt-oss's sliding layers: a window and a sink per head.
  const int L = 1000, H = 8, Hk = 1, D = 64, w = 128;
  const Data x = make_data(L, H, Hk, D, 83);
  const int first = L - w;
  const std::vector<double> base = key_lse(x, L, H, Hk, D, first);
  std::vector<float> sinks(H);
  for (int h = 0; h < H; ++h) sinks[h] = static_cast<float>(base[h] + (h % 3) - 1.0);
  std::vector<double> ref, lse;
  reference(x, L, H, Hk, D, ref, lse, first, sinks.data());
  Cache c(1, Hk, D, 1024);
  c.fill(0, x.k, x.v, L);
  for (float depth : {0.0f, 16.0f})
    expect_close(run(c, H, {x.q}, depth, nullptr, w, sinks.data()), H, D, ref, lse,
                 "depth " + std::to_string(depth));
}

TEST(DecodeSinks, TheGuardRecomputesWithTheSink) {
  const int L = 800, H = 4, Hk = 1, D = 64;
  const Data x = make_data(L, H, Hk, D, 84);
  const std::vector<double> base = key_lse(x, L, H, Hk, D);
  std::vector<float> sinks(H);
  for (int h = 0; h < H; ++h) sinks[h] = static_cast<float>(base[h] + 1.5 * h - 2.0);
  std::vector<double> ref, lse;
  reference(x, L, H, Hk, D, ref, lse, 0, sinks.data());
  Cache c(1, Hk, D, 832);
  c.fill(0, x.k, x.v, L);
  for (float offset : {-70.0f, 200.0f}) {
    fold::cpu::DecodeHooks hooks;
    hooks.z_offset = offset;
    const Step s = run(c, H, {x.q}, 16.0f, &hooks, 0, sinks.data());
    EXPECT_GT(s.stats.fixup_rows, 0) << offset;
    expect_close(s, H, D, ref, lse, "z offset " + std::to_string(offset));
  }
}

TEST(DecodeSinks, ValidationNamesTheArgument) {
  Cache c(1, 1, 64, 128);
  const Data x = make_data(10, 2, 1, 64, 85);
  c.fill(0, x.k, x.v, 10);
  std::vector<bf16_t> q(128, bf16_t{0}), out(128);
  const fold_tensor_t none{nullptr, 0, 0, 0};
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> sinks = {0.5f, bad};
    fold_decode_params_t p = params(2, 0.0f);
    p.softmax_scale = 0.125f;
    p.sinks = sinks.data();
    fold_kvcache_t desc = c.desc();
    EXPECT_EQ(fold_decode_cpu(&desc, &p, fold_tensor_t{q.data(), 128, 0, 64}, none, none,
                              fold_tensor_t{out.data(), 128, 0, 64}, nullptr, nullptr),
              FOLD_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(fold_last_error()).find("sinks[1]"), std::string::npos)
        << fold_last_error();
  }
}

}  // namespace
