// The reference forward against a naive float64 attention.
#include <gtest/gtest.h>

#include <ostream>

#include "cpu/reference.h"
#include "test_util.h"

namespace fold::test {
namespace {

struct FwdParam {
  Case c;
  const char *name;
};

// Names the case in test listings (instead of a byte dump of the struct).
void PrintTo(const FwdParam &param, std::ostream *os) { *os << param.name; }

class ForwardVsNaive : public ::testing::TestWithParam<FwdParam> {};

TEST_P(ForwardVsNaive, MatchesFloat64WithinRounding) {
  const Case &c = GetParam().c;
  const auto cu = offsets(c.lengths);
  const fold_attn_problem_t p = packed_problem(c, cu);
  std::mt19937_64 rng(42);
  HostTensor q(c.dtype, p.total_tokens, c.n_heads, c.head_dim),
      k(c.dtype, p.total_tokens, c.n_kv_heads, c.head_dim),
      v(c.dtype, p.total_tokens, c.n_kv_heads, c.head_dim),
      out(c.dtype, p.total_tokens, c.n_heads, c.head_dim);
  q.fill_normal(rng, 1.5f);
  k.fill_normal(rng, 1.5f);
  v.fill_normal(rng, 1.0f, 0.5f);
  std::vector<float> lse(static_cast<size_t>(p.total_tokens * c.n_heads));
  cpu::forward(p, q.view(), k.view(), v.view(), out.view(), lse.data());
  const Naive n = naive_attention(p, q, k, v, nullptr);
  const double floor = c.dtype == FOLD_DTYPE_F32 ? 1e-7 : rounding_floor(c.dtype, n.out);
  EXPECT_LT(rel_error(out, n.out), 3.0 * floor + 2e-7) << "floor " << floor;
  double worst = 0;
  for (int64_t t = 0; t < p.total_tokens; ++t)
    for (int h = 0; h < c.n_heads; ++h)
      worst = std::max(worst, std::fabs(lse[h * p.total_tokens + t] - n.lse[t * c.n_heads + h]));
  EXPECT_LT(worst, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ForwardVsNaive,
    ::testing::Values(FwdParam{{{130, 1, 0, 77}, 4, 2, 64, FOLD_DTYPE_BF16, 1}, "bf16_causal_gqa"},
                      FwdParam{{{130, 77}, 4, 4, 64, FOLD_DTYPE_F16, 0}, "f16_mha"},
                      FwdParam{{{200}, 6, 1, 96, FOLD_DTYPE_BF16, 1}, "bf16_mqa_d96"},
                      FwdParam{{{70, 33}, 2, 2, 256, FOLD_DTYPE_BF16, 1}, "bf16_d256"},
                      FwdParam{{{65, 3}, 3, 1, 37, FOLD_DTYPE_F32, 1}, "f32_odd_dim"},
                      FwdParam{{{129}, 2, 1, 128, FOLD_DTYPE_F32, 0}, "f32_d128"}),
    [](const ::testing::TestParamInfo<FwdParam> &info) { return std::string(info.param.name); });

}  // namespace
}  // namespace fold::test
