// The C ABI: every bad argument gives a status and a message naming it; nothing crashes.
#include <gtest/gtest.h>

#include <string>

#include "fold_attention/fold_attention.h"
#include "test_util.h"

namespace fold::test {
namespace {

struct Fixture {
  Case c{{10, 6}, 4, 2, 16, FOLD_DTYPE_BF16, 1};
  std::vector<int32_t> cu = offsets(c.lengths);
  fold_attn_problem_t p = packed_problem(c, cu);
  HostTensor q{c.dtype, 16, 4, 16}, k{c.dtype, 16, 2, 16}, v{c.dtype, 16, 2, 16},
      o{c.dtype, 16, 4, 16};
  std::vector<float> lse = std::vector<float>(64);
  fold_status_t fwd() {
    return fold_fwd_cpu(&p, q.view(), k.view(), v.view(), o.view(), lse.data());
  }
};

void expect_error(fold_status_t status, const std::string &needle) {
  EXPECT_EQ(status, FOLD_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fold_last_error()).find(needle), std::string::npos) << fold_last_error();
}

TEST(CApi, AcceptsAValidCall) {
  Fixture f;
  std::mt19937_64 rng(1);
  f.q.fill_normal(rng);
  f.k.fill_normal(rng);
  f.v.fill_normal(rng);
  EXPECT_EQ(f.fwd(), FOLD_OK) << fold_last_error();
  EXPECT_STREQ(fold_last_error(), "");
}

TEST(CApi, RejectsEveryBadArgumentWithItsName) {
  {
    Fixture f;
    f.p.n_heads = 5;
    expect_error(f.fwd(), "n_heads=5 is not a multiple of n_kv_heads=2");
  }
  {
    Fixture f;
    f.p.head_dim = 300;
    expect_error(f.fwd(), "head_dim=300");
  }
  {
    Fixture f;
    f.p.head_dim = 0;
    expect_error(f.fwd(), "head_dim=0");
  }
  {
    Fixture f;
    f.p.dtype = 9;
    expect_error(f.fwd(), "dtype=9");
  }
  {
    Fixture f;
    f.p.softmax_scale = -1.0f;
    expect_error(f.fwd(), "softmax_scale");
  }
  {
    Fixture f;
    f.p.softmax_scale = std::numeric_limits<float>::quiet_NaN();
    expect_error(f.fwd(), "softmax_scale");
  }
  {
    Fixture f;
    f.p.causal = 2;
    expect_error(f.fwd(), "causal=2");
  }
  {
    Fixture f;
    f.p.batch = 0;
    expect_error(f.fwd(), "batch=0");
  }
  {
    Fixture f;
    f.cu[0] = 1;
    expect_error(f.fwd(), "cu_seqlens[0]=1");
  }
  {
    Fixture f;
    f.cu = {0, 12, 10};
    f.p.cu_seqlens = f.cu.data();
    f.p.total_tokens = 10;
    f.p.seqlen = 0;
    expect_error(f.fwd(), "non-decreasing");
  }
  {
    Fixture f;
    f.p.total_tokens = 15;
    expect_error(f.fwd(), "cu_seqlens[-1]=16");
  }
  {
    Fixture f;
    f.p.seqlen = 8;
    expect_error(f.fwd(), "more than seqlen");
  }
  {
    Fixture f;
    fold_tensor_t bad = f.q.view();
    bad.data = nullptr;
    expect_error(fold_fwd_cpu(&f.p, bad, f.k.view(), f.v.view(), f.o.view(), f.lse.data()),
                 "q is NULL");
  }
  {
    Fixture f;
    fold_tensor_t bad = f.o.view();
    bad.token_stride = 8;
    expect_error(fold_fwd_cpu(&f.p, f.q.view(), f.k.view(), f.v.view(), bad, f.lse.data()),
                 "out: token_stride");
  }
  {
    Fixture f;
    fold_tensor_t bad = f.o.view();
    bad.head_stride = 4;
    expect_error(fold_fwd_cpu(&f.p, f.q.view(), f.k.view(), f.v.view(), bad, f.lse.data()),
                 "out: head_stride");
  }
  {
    Fixture f;
    fold_tensor_t bad = f.k.view();
    bad.token_stride = -16;
    expect_error(fold_fwd_cpu(&f.p, f.q.view(), bad, f.v.view(), f.o.view(), f.lse.data()),
                 "k: strides must be non-negative");
  }
  {
    Fixture f;
    expect_error(fold_fwd_cpu(&f.p, f.q.view(), f.k.view(), f.v.view(), f.o.view(), nullptr),
                 "lse is NULL");
  }
  {
    Fixture f;
    f.p.cu_seqlens = nullptr;
    f.p.seqlen = 8;
    f.p.batch = 2;
    expect_error(f.fwd(), "out: batch_stride");  // dense output with batch_stride 0
  }
  expect_error(fold_check_problem(nullptr, 1), "problem is NULL");
}

// Session 39's C ABI audit: byte extents that wrap the address space (the element offsets fit
// int64, the bytes did not) and misaligned data.
TEST(CApi, RejectsViewsWhoseBytesWrapOrAreMisaligned) {
  {
    Case c{{4, 4}, 1, 1, 8, FOLD_DTYPE_F32, 0};
    std::vector<int32_t> cu = offsets(c.lengths);
    fold_attn_problem_t p = packed_problem(c, cu);
    p.cu_seqlens = nullptr;  // dense: batch 2 x seqlen 4
    p.batch = 2;
    p.seqlen = 4;
    p.total_tokens = 8;
    HostTensor q{c.dtype, 8, 1, 8}, k{c.dtype, 8, 1, 8}, v{c.dtype, 8, 1, 8}, o{c.dtype, 8, 1, 8};
    std::vector<float> lse(8);
    fold_tensor_t kk = k.view();
    kk.batch_stride = int64_t{1} << 62;  // 2^64 bytes: request 1 would read request 0's keys
    kk.token_stride = 8;
    fold_tensor_t qd = q.view(), vd = v.view(), od = o.view();
    for (fold_tensor_t *t : {&qd, &vd, &od}) {
      t->batch_stride = 32;
      t->token_stride = 8;
    }
    expect_error(fold_fwd_cpu(&p, qd, kk, vd, od, lse.data()), "k: the view's extent");
    fold_tensor_t odd = qd;
    odd.data = static_cast<char *>(odd.data) + 1;
    expect_error(fold_fwd_cpu(&p, odd, k.view(), vd, od, lse.data()), "q: data must be aligned");
    expect_error(fold_fwd_cpu(&p, qd, k.view(), vd, od,
                              reinterpret_cast<float *>(reinterpret_cast<char *>(lse.data()) + 2)),
                 "lse must be 4-byte aligned");
    EXPECT_EQ(fold_fwd_cpu(&p, qd, k.view(), vd, od, lse.data()), FOLD_OK) << fold_last_error();
    // The last element at offset INT64_MAX: its count does not fit int64 (no signed overflow).
    fold_tensor_t far = kk;
    far.batch_stride = 0;
    far.token_stride = INT64_MAX - 7;
    expect_error(fold_fwd_cpu(&p, qd, far, vd, od, lse.data()), "k: the view's extent");
    // The float arrays of the backward and its preprocess: aligned.
    std::vector<float> delta(9), bounds(2 * FOLD_BWD_BOUNDS + 1);
    float *odd_f = reinterpret_cast<float *>(reinterpret_cast<char *>(delta.data()) + 2);
    expect_error(fold_bwd_preprocess_cpu(&p, k.view(), vd, od, od, odd_f, bounds.data()),
                 "delta must be 4-byte aligned");
    expect_error(fold_bwd_preprocess_cpu(
                     &p, k.view(), vd, od, od, delta.data(),
                     reinterpret_cast<float *>(reinterpret_cast<char *>(bounds.data()) + 1)),
                 "bounds must be 4-byte aligned");
    HostTensor dq{c.dtype, 8, 1, 8}, dk{c.dtype, 8, 1, 8}, dv{c.dtype, 8, 1, 8};
    fold_tensor_t dqd = dq.view(), dkd = dk.view(), dvd = dv.view();
    for (fold_tensor_t *t : {&dqd, &dkd, &dvd}) {
      t->batch_stride = 32;
      t->token_stride = 8;
    }
    expect_error(fold_bwd_cpu(&p, qd, k.view(), vd, od, od, odd_f, dqd, dkd, dvd),
                 "lse must be 4-byte aligned");
  }
}

TEST(CApi, CudaEntryPointsFailCleanlyWithoutADevice) {
  Fixture f;
  std::vector<float> delta(64), bounds(2 * 2 * 4);
  const fold_status_t s = fold_bwd_preprocess_cuda(
      &f.p, f.k.view(), f.v.view(), f.o.view(), f.o.view(), delta.data(), bounds.data(), nullptr);
  if (!fold_built_with_cuda()) {
    EXPECT_EQ(s, FOLD_ERR_NO_CUDA);
    EXPECT_NE(std::string(fold_last_error()).find("built without CUDA"), std::string::npos);
  } else {
    // Host pointers and (here) no GPU: a CUDA error or an unsupported-layout report, never a crash.
    EXPECT_NE(s, FOLD_OK);
    EXPECT_STRNE(fold_last_error(), "");
  }
}

TEST(CApi, CudaTrainingEntryPointsFailCleanlyWithoutADevice) {
  Fixture f;  // head_dim 16: not a CUDA training head dimension
  std::vector<float> lse(64);
  const fold_status_t fwd =
      fold_fwd_cuda(&f.p, f.q.view(), f.k.view(), f.v.view(), f.o.view(), lse.data(), nullptr);
  HostTensor dq{f.c.dtype, 16, 4, 16}, dk{f.c.dtype, 16, 2, 16}, dv{f.c.dtype, 16, 2, 16};
  // The workspace size of a problem fold_bwd_cuda rejects is 0, with the reason; of one it
  // takes, at least the int32 dQ grid.
  EXPECT_EQ(fold_bwd_cuda_workspace_size(&f.p), size_t{0});
  EXPECT_NE(std::string(fold_last_error()).find("head_dim=16"), std::string::npos)
      << fold_last_error();
  fold_attn_problem_t p64 = f.p;
  p64.head_dim = 64;
  const size_t bytes = fold_bwd_cuda_workspace_size(&p64);
  EXPECT_GE(bytes, size_t{16 * 4 * 64 * 4});
  EXPECT_EQ(fold_bwd_cuda_workspace_size(nullptr), size_t{0});
  std::vector<char> workspace(bytes + 16);
  const fold_status_t bwd =
      fold_bwd_cuda(&f.p, f.q.view(), f.k.view(), f.v.view(), f.o.view(), f.o.view(), lse.data(),
                    dq.view(), dk.view(), dv.view(), workspace.data(), bytes, nullptr);
  for (const fold_status_t s : {fwd, bwd}) {
    if (!fold_built_with_cuda()) {
      EXPECT_EQ(s, FOLD_ERR_NO_CUDA);
    } else {
      EXPECT_EQ(s, FOLD_ERR_UNSUPPORTED);
    }
  }
  if (fold_built_with_cuda()) {
    EXPECT_NE(std::string(fold_last_error()).find("head_dim=16"), std::string::npos)
        << fold_last_error();
  }
}

TEST(CApi, KvBoundsEntryPointsCheckTheirArguments) {
  Fixture f;  // head_dim 16: not a CUDA training head dimension
  std::vector<float> lse(64),
      kv_bounds(static_cast<size_t>(f.p.batch) * f.p.n_kv_heads * FOLD_BWD_BOUNDS);
  EXPECT_NE(fold_fwd_cuda_kv_bounds(&f.p, f.q.view(), f.k.view(), f.v.view(), f.o.view(),
                                    lse.data(), nullptr, nullptr),
            FOLD_OK);
  if (fold_built_with_cuda()) {
    EXPECT_NE(std::string(fold_last_error()).find("kv_bounds is NULL"), std::string::npos)
        << fold_last_error();
  }
  const fold_status_t fwd = fold_fwd_cuda_kv_bounds(
      &f.p, f.q.view(), f.k.view(), f.v.view(), f.o.view(), lse.data(), kv_bounds.data(), nullptr);
  HostTensor dq{f.c.dtype, 16, 4, 16}, dk{f.c.dtype, 16, 2, 16}, dv{f.c.dtype, 16, 2, 16};
  const size_t bytes = fold_bwd_cuda_workspace_size(&f.p);
  std::vector<char> workspace(bytes + 16);
  const fold_status_t bwd = fold_bwd_cuda_kv_bounds(
      &f.p, f.q.view(), f.k.view(), f.v.view(), f.o.view(), f.o.view(), lse.data(), dq.view(),
      dk.view(), dv.view(), kv_bounds.data(), workspace.data(), bytes, nullptr);
  for (const fold_status_t s : {fwd, bwd})
    EXPECT_EQ(s, fold_built_with_cuda() ? FOLD_ERR_UNSUPPORTED : FOLD_ERR_NO_CUDA);
}

TEST(CApi, EmptyBatchIsAValidNoOp) {
  Case c{{0, 0}, 2, 1, 8, FOLD_DTYPE_BF16, 1};
  const auto cu = offsets(c.lengths);
  const fold_attn_problem_t p = packed_problem(c, cu);
  fold_tensor_t none{nullptr, 0, 16, 8};
  EXPECT_EQ(fold_fwd_cpu(&p, none, none, none, none, nullptr), FOLD_OK) << fold_last_error();
}

TEST(CApi, InputsMayUseAnyNonNegativeStrides) {
  // K/V broadcast over tokens (token_stride 0) gives the same result as materialised copies.
  Fixture f;
  std::mt19937_64 rng(2);
  f.q.fill_normal(rng);
  HostTensor one_k(f.c.dtype, 1, 2, 16), one_v(f.c.dtype, 1, 2, 16);
  one_k.fill_normal(rng);
  one_v.fill_normal(rng);
  for (int64_t t = 0; t < 16; ++t)
    for (int i = 0; i < 32; ++i)
      f.k.set(t * 32 + i, one_k.get(i)), f.v.set(t * 32 + i, one_v.get(i));
  ASSERT_EQ(f.fwd(), FOLD_OK) << fold_last_error();
  HostTensor copy = f.o;
  fold_tensor_t bk = one_k.view(), bv = one_v.view();
  bk.token_stride = bv.token_stride = 0;
  ASSERT_EQ(fold_fwd_cpu(&f.p, f.q.view(), bk, bv, f.o.view(), f.lse.data()), FOLD_OK)
      << fold_last_error();
  EXPECT_EQ(copy.bytes, f.o.bytes);
}

TEST(CApi, RejectsStridesWhoseExtentOverflowsAndAliasedOutputs) {
  {
    Fixture f;
    fold_tensor_t bad = f.o.view();
    bad.head_stride = int64_t{1} << 62;  // heads * stride overflows int64
    bad.token_stride = 1;
    expect_error(fold_fwd_cpu(&f.p, f.q.view(), f.k.view(), f.v.view(), bad, f.lse.data()),
                 "overflows 64-bit offsets");
  }
  {
    Fixture f;
    fold_tensor_t bad = f.k.view();
    bad.token_stride = int64_t{1} << 61;  // an input whose addresses leave int64
    expect_error(fold_fwd_cpu(&f.p, f.q.view(), bad, f.v.view(), f.o.view(), f.lse.data()),
                 "k: the view's extent overflows");
  }
  {
    Fixture f;  // lse written over out
    expect_error(fold_fwd_cpu(&f.p, f.q.view(), f.k.view(), f.v.view(), f.o.view(),
                              reinterpret_cast<float *>(f.o.bytes.data())),
                 "out and lse overlap");
  }
  {
    Fixture f;  // dq and dk aliased
    HostTensor g(f.c.dtype, 16, 4, 16);
    expect_error(fold_bwd_cpu(&f.p, f.q.view(), f.k.view(), f.v.view(), f.o.view(), f.o.view(),
                              f.lse.data(), g.view(), g.view(), f.v.view()),
                 "dq and dk overlap");
  }
  {
    Fixture f;
    f.p.n_heads = 70000;
    f.p.n_kv_heads = 2;
    expect_error(fold_check_problem(&f.p, 1), "n_heads=70000 exceeds");
  }
}

TEST(CApi, WorkspaceSizeOfAnInvalidProblemIsZero) {
  Fixture f;
  f.p.head_dim = -4;
  EXPECT_EQ(fold_bwd_cuda_workspace_size(&f.p), 0u);
  EXPECT_EQ(fold_bwd_cuda_workspace_size(nullptr), 0u);
}

TEST(CApi, Version) { EXPECT_STREQ(fold_version(), "0.1.0"); }

}  // namespace
}  // namespace fold::test
