// Test helpers shared by the training tests: random packed inputs for a Case, one CPU reference
// forward + backward over them, and the bit comparisons of a request alone and packed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "cpu/reference.h"
#include "test_util.h"

namespace fold::test {

struct Grads {
  HostTensor out, dq, dk, dv;
  std::vector<float> lse;
};

struct Inputs {
  Case c;
  std::vector<int32_t> cu;
  fold_attn_problem_t p;
  HostTensor q, k, v, dout;
};

// Normal q, k, v (offset 0.25) and dout, drawn in that order from one seeded generator.
inline Inputs make_inputs(const Case &c, uint64_t seed, float q_scale = 1.0f, float do_scale = 1.0f,
                          float k_scale = 1.0f) {
  Inputs in{c, offsets(c.lengths), {}, {}, {}, {}, {}};
  in.p = packed_problem(c, in.cu);
  const int64_t T = in.p.total_tokens;
  std::mt19937_64 rng(seed);
  in.q = HostTensor(c.dtype, T, c.n_heads, c.head_dim);
  in.k = HostTensor(c.dtype, T, c.n_kv_heads, c.head_dim);
  in.v = HostTensor(c.dtype, T, c.n_kv_heads, c.head_dim);
  in.dout = HostTensor(c.dtype, T, c.n_heads, c.head_dim);
  in.q.fill_normal(rng, q_scale);
  in.k.fill_normal(rng, k_scale);
  in.v.fill_normal(rng, 1.0f, 0.25f);
  in.dout.fill_normal(rng, do_scale);
  return in;
}

// The CPU reference forward, then its backward, on in.p.
inline Grads run(Inputs &in, const cpu::BackwardOrder *order = nullptr,
                 cpu::BackwardStats *stats = nullptr) {
  const auto &c = in.c;
  const int64_t T = in.p.total_tokens;
  Grads g{HostTensor(c.dtype, T, c.n_heads, c.head_dim),
          HostTensor(c.dtype, T, c.n_heads, c.head_dim),
          HostTensor(c.dtype, T, c.n_kv_heads, c.head_dim),
          HostTensor(c.dtype, T, c.n_kv_heads, c.head_dim),
          std::vector<float>(static_cast<size_t>(T * c.n_heads))};
  cpu::forward(in.p, in.q.view(), in.k.view(), in.v.view(), g.out.view(), g.lse.data());
  cpu::backward(in.p, in.q.view(), in.k.view(), in.v.view(), g.out.view(), in.dout.view(),
                g.lse.data(), g.dq.view(), g.dk.view(), g.dv.view(), order, stats);
  return g;
}

inline bool same_bits(const HostTensor &a, const HostTensor &b) { return a.bytes == b.bytes; }

// Copies a one-request tensor into rows [off, off + its tokens) of a packed one.
inline void copy_at(const HostTensor &src, HostTensor &dst, int64_t off) {
  const size_t row = src.bytes.size() / static_cast<size_t>(src.tokens);
  std::copy(src.bytes.begin(), src.bytes.end(),
            dst.bytes.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(off) * row));
}

// Whether rows [off, off + x's tokens) of y hold x's bits.
inline bool equal_at(const HostTensor &x, const HostTensor &y, int64_t off) {
  const size_t row = x.bytes.size() / static_cast<size_t>(x.tokens);
  return std::equal(x.bytes.begin(), x.bytes.end(),
                    y.bytes.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(off) * row));
}

// A request's inputs placed at `off` of a packed batch: its four gradients and its output
// carry the same bits there as alone.
inline void expect_alone_equals_packed(Inputs &alone, Inputs &packed, int64_t off) {
  for (auto [a, b] : {std::pair{&alone.q, &packed.q}, std::pair{&alone.k, &packed.k},
                      std::pair{&alone.v, &packed.v}, std::pair{&alone.dout, &packed.dout}})
    copy_at(*a, *b, off);
  const Grads a = run(alone), b = run(packed);
  EXPECT_TRUE(equal_at(a.out, b.out, off));
  EXPECT_TRUE(equal_at(a.dq, b.dq, off));
  EXPECT_TRUE(equal_at(a.dk, b.dk, off));
  EXPECT_TRUE(equal_at(a.dv, b.dv, off));
}

}  // namespace fold::test
