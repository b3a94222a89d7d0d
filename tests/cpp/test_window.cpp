// Sliding windows (window_before / window_after) in the CPU reference: the block ranges cover
// every visible pair, forward and backward match a float64 attention that applies the window
// itself, a window that masks nothing changes no bit, and the backward keeps its invariances.
#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <random>
#include <string>

#include "core/window.h"
#include "cpu/reference.h"
#include "training_run.h"

namespace fold::test {
namespace {

// The window tests' inputs: q and k at 1.5 (peaked enough rows), dout at 1.
Inputs inputs(const Case &c, uint64_t seed) { return make_inputs(c, seed, 1.5f, 1.0f, 1.5f); }

// Brute force: every visible (query, key) pair of random problems lies inside the ranges the
// loops visit, from both sides, and key_visible agrees with the rule written out.
TEST(WindowRanges, CoverEveryVisiblePair) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 400; ++trial) {
    fold_attn_problem_t p{};
    p.causal = static_cast<int32_t>(rng() % 2);
    p.window_before = static_cast<int32_t>(rng() % 4 == 0 ? 0 : 1 + rng() % 40);
    p.window_after = static_cast<int32_t>(rng() % 4 == 0 ? 0 : 1 + rng() % 40);
    const int64_t len = 1 + static_cast<int64_t>(rng() % 90);
    const int64_t block = 1 + static_cast<int64_t>(rng() % 20);
    for (int64_t b0 = 0; b0 < len; b0 += block) {
      const int64_t b1 = std::min(len, b0 + block);
      int64_t klo, khi, qlo, qhi;
      visible_keys(p, b0, b1, len, &klo, &khi);
      seeing_queries(p, b0, b1, len, &qlo, &qhi);
      for (int64_t x = b0; x < b1; ++x)
        for (int64_t y = 0; y < len; ++y) {
          const bool rule = !(p.causal && y > x) &&
                            !(p.window_before > 0 && x - y >= p.window_before) &&
                            !(p.window_after > 0 && y - x >= p.window_after);
          ASSERT_EQ(key_visible(p, x, y), rule);
          if (key_visible(p, x, y)) {  // query x sees key y
            ASSERT_TRUE(y >= klo && y < khi) << "trial " << trial;
          }
          if (key_visible(p, y, x)) {  // key x is seen by query y
            ASSERT_TRUE(y >= qlo && y < qhi) << "trial " << trial;
          }
        }
      ASSERT_LE(khi, len);
      ASSERT_LE(qhi, len);
      ASSERT_GE(klo, 0);
      ASSERT_GE(qlo, 0);
    }
  }
}

TEST(WindowRanges, MasksNothingExactlyWhenNoPairIsCut) {
  for (int causal : {0, 1})
    for (int before : {0, 1, 5, 63, 64, 65})
      for (int after : {0, 1, 5, 64, 65}) {
        fold_attn_problem_t p{};
        p.causal = causal;
        p.window_before = before;
        p.window_after = after;
        const int64_t longest = 64;
        bool cut = false;
        for (int64_t i = 0; i < longest; ++i)
          for (int64_t j = 0; j < longest; ++j) {
            const bool causal_only = !(causal && j > i);
            cut = cut || (causal_only && !key_visible(p, i, j));
          }
        EXPECT_EQ(window_masks_nothing(p, longest), !cut)
            << "causal " << causal << " before " << before << " after " << after;
      }
}

struct WinParam {
  Case c;
  const char *name;
};
void PrintTo(const WinParam &param, std::ostream *os) { *os << param.name; }

class WindowVsNaive : public ::testing::TestWithParam<WinParam> {};

TEST_P(WindowVsNaive, ForwardAndGradientsMatchFloat64) {
  Inputs in = inputs(GetParam().c, 17);
  const Grads g = run(in);
  const Naive n = naive_attention(in.p, in.q, in.k, in.v, &in.dout);
  const bool f32 = in.c.dtype == FOLD_DTYPE_F32;
  auto bar = [&](const std::vector<double> &ref, double times) {
    return f32 ? 2e-5 : times * rounding_floor(in.c.dtype, ref);
  };
  EXPECT_LT(rel_error(g.out, n.out), bar(n.out, 3.0));
  EXPECT_LT(rel_error(g.dq, n.dq), bar(n.dq, 6.0));
  EXPECT_LT(rel_error(g.dk, n.dk), bar(n.dk, 6.0));
  EXPECT_LT(rel_error(g.dv, n.dv), bar(n.dv, 6.0));
  double worst = 0;
  for (int64_t t = 0; t < in.p.total_tokens; ++t)
    for (int h = 0; h < in.c.n_heads; ++h)
      worst = std::max(worst,
                       std::fabs(g.lse[h * in.p.total_tokens + t] - n.lse[t * in.c.n_heads + h]));
  EXPECT_LT(worst, 1e-4);
}

Case windowed(Case c, int before, int after) {
  c.window_before = before;
  c.window_after = after;
  return c;
}

// Lengths across several 64- / 128-row blocks so that windows skip whole blocks on both sides.
INSTANTIATE_TEST_SUITE_P(
    Windows, WindowVsNaive,
    ::testing::Values(
        WinParam{windowed({{300, 1, 0, 77}, 4, 2, 64, FOLD_DTYPE_BF16, 1}, 50, 0), "causal_w50"},
        WinParam{windowed({{260}, 2, 1, 128, FOLD_DTYPE_F16, 0}, 40, 70), "two_sided"},
        WinParam{windowed({{200, 9}, 2, 2, 64, FOLD_DTYPE_BF16, 0}, 0, 33), "after_only"},
        WinParam{windowed({{200}, 2, 2, 64, FOLD_DTYPE_BF16, 0}, 129, 0), "before_only"},
        WinParam{windowed({{150}, 3, 1, 96, FOLD_DTYPE_BF16, 1}, 2, 0), "w2"},
        WinParam{windowed({{190, 20}, 2, 1, 24, FOLD_DTYPE_F32, 1}, 65, 0), "f32_causal_w65"}),
    [](const ::testing::TestParamInfo<WinParam> &info) { return std::string(info.param.name); });

// A window at least as long as every request masks nothing: the same bits as no window.
TEST(Window, OneThatMasksNothingChangesNoBit) {
  for (int causal : {0, 1}) {
    Inputs plain = inputs(Case{{180, 7}, 4, 2, 64, FOLD_DTYPE_BF16, causal}, 5);
    Inputs wide = plain;
    wide.c.window_before = 180;
    wide.c.window_after = causal ? 1 : 180;
    wide.p = packed_problem(wide.c, wide.cu);
    ASSERT_TRUE(window_masks_nothing(wide.p, 180));
    const Grads a = run(plain), b = run(wide);
    EXPECT_TRUE(same_bits(a.out, b.out) && same_bits(a.dq, b.dq) && same_bits(a.dk, b.dk) &&
                same_bits(a.dv, b.dv))
        << "causal " << causal;
  }
}

// ... and one that masks something changes the result (the window is not ignored).
TEST(Window, OneThatMasksChangesTheResult) {
  Inputs plain = inputs(Case{{180}, 2, 2, 64, FOLD_DTYPE_BF16, 1}, 5);
  Inputs narrow = plain;
  narrow.c.window_before = 100;
  narrow.p = packed_problem(narrow.c, narrow.cu);
  const Grads a = run(plain), b = run(narrow);
  const size_t row = a.out.bytes.size() / 180;
  // Rows before 100 see every earlier key either way: identical; later rows differ.
  EXPECT_TRUE(
      std::equal(a.out.bytes.begin(), a.out.bytes.begin() + 100 * row, b.out.bytes.begin()));
  EXPECT_FALSE(std::equal(a.out.bytes.begin() + 100 * row, a.out.bytes.end(),
                          b.out.bytes.begin() + 100 * row));
}

// A window of one key: every query sees only its own key, so out is V itself (P = 1) and
// dV is dO summed over the group's heads.
TEST(Window, OfOneKeyGivesV) {
  Inputs in = inputs(windowed(Case{{150, 40}, 2, 1, 64, FOLD_DTYPE_BF16, 0}, 1, 1), 23);
  const Grads g = run(in);
  for (int64_t t = 0; t < in.p.total_tokens; ++t)
    for (int h = 0; h < 2; ++h)
      for (int d = 0; d < 64; ++d) {
        ASSERT_EQ(g.out.at(t, h, d), in.v.at(t, 0, d)) << t << " " << h << " " << d;
        ASSERT_EQ(g.dv.at(t, 0, d),
                  to_float(bf16_from_float(in.dout.at(t, 0, d) + in.dout.at(t, 1, d))));
      }
}

TEST(Window, DqIsIdenticalUnderAnyTileOrder) {
  Inputs in = inputs(windowed(Case{{300, 129}, 4, 2, 64, FOLD_DTYPE_BF16, 0}, 70, 90), 11);
  const Grads base = run(in);
  for (uint64_t seed : {1, 2}) {
    // Key blocks in any order: every gradient's bits (dK / dV of a key block depend on no
    // other key block).
    cpu::BackwardOrder key_order{seed, 0};
    const Grads a = run(in, &key_order);
    EXPECT_TRUE(same_bits(a.dq, base.dq) && same_bits(a.dk, base.dk) && same_bits(a.dv, base.dv))
        << "seed " << seed;
    // Any tile order: dQ's bits (the integer grid).
    cpu::BackwardOrder all_order{seed, seed * 17 + 1};
    EXPECT_TRUE(same_bits(run(in, &all_order).dq, base.dq)) << "seed " << seed;
  }
}

TEST(Window, RequestIsBitIdenticalAloneAndPackedAtAnOffset) {
  Inputs alone = inputs(windowed(Case{{190}, 4, 2, 64, FOLD_DTYPE_BF16, 1}, 60, 0), 31);
  Inputs packed = inputs(windowed(Case{{33, 190, 75}, 4, 2, 64, FOLD_DTYPE_BF16, 1}, 60, 0), 32);
  expect_alone_equals_packed(alone, packed, 33);
}

TEST(Window, NegativeSidesAreRejected) {
  const Case c{{10}, 2, 2, 64, FOLD_DTYPE_BF16, 1};
  const auto cu = offsets(c.lengths);
  for (int side : {0, 1}) {
    fold_attn_problem_t p = packed_problem(c, cu);
    (side ? p.window_after : p.window_before) = -1;
    EXPECT_EQ(fold_check_problem(&p, 1), FOLD_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(fold_last_error()).find(side ? "window_after" : "window_before"),
              std::string::npos)
        << fold_last_error();
  }
}

// The CUDA entry points take any window (the kernels apply it); the backward's workspace does
// not depend on it (the grid, Delta and bounds cover every row either way).
TEST(Window, CudaWorkspaceIsTheWindowlessOne) {
  const Case c{{256, 31}, 2, 2, 64, FOLD_DTYPE_BF16, 1};
  const auto cu = offsets(c.lengths);
  fold_attn_problem_t p = packed_problem(c, cu);
  const size_t plain = fold_bwd_cuda_workspace_size(&p);
  ASSERT_GT(plain, 0u) << fold_last_error();
  p.window_before = 100;
  p.window_after = 7;
  EXPECT_EQ(fold_bwd_cuda_workspace_size(&p), plain) << fold_last_error();
}

}  // namespace
}  // namespace fold::test
