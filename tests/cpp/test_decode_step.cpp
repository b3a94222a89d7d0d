// The decode CPU reference end to end: accuracy against float64, cut-mass accounting (cut
// keys are never read), invariance under batch, threads and pages, the guard, v8 re-scaling
// and the C ABI's validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/half_types.h"
#include "decode/decode_cpu.h"
#include "decode/reference_z.h"
#include "decode/v8_planes.h"
#include "decode_run.h"
#include "fold_attention/decode.h"

namespace {

using namespace fold::test::dec;

TEST(DecodeStep, AccuracyAgainstFloat64) {
  const int L = 900, H = 8, Hk = 2, D = 64;
  const Data x = make_data(L, H, Hk, D, 11);
  std::vector<double> ref, lse;
  reference(x, L, H, Hk, D, ref, lse);
  const double floor = floor_err(ref);
  for (bool v8 : {false, true}) {
    Cache c(1, Hk, D, 1024, v8);
    c.fill(0, x.k, x.v, L);
    for (float depth : {0.0f, 16.0f, 12.0f}) {
      const Step s = run(c, H, {x.q}, depth);
      const double e = rel_err(s, 0, H, D, ref);
      double lse_err = 0;
      for (int h = 0; h < H; ++h) lse_err = std::max(lse_err, std::fabs(s.lse[h] - lse[h]));
      std::printf("v8=%d depth=%g: rel err %.3e (bf16 floor %.3e), max |lse err| %.2e, live %.3f\n",
                  v8, depth, e, floor, lse_err, double(s.stats.live_keys) / s.stats.keys);
      EXPECT_LT(e, 2.0 * floor);
      EXPECT_LT(lse_err, 1e-3);
    }
  }
}

TEST(DecodeStep, CutKeysAreNeverRead) {
  const int L = 1500, H = 4, Hk = 1, D = 64;
  const Data x = make_data(L, H, Hk, D, 12);
  for (bool v8 : {false, true}) {
    Cache c(1, Hk, D, 1536, v8);
    c.fill(0, x.k, x.v, L);
    std::vector<std::vector<uint8_t>> verdicts;
    fold::cpu::DecodeHooks hooks;
    hooks.verdicts = &verdicts;
    const Step before = run(c, H, {x.q}, 12.0f, &hooks);
    // The reference sample's keys are read with both K planes by the front, whatever
    // their verdict: their plane B stays.
    fold::decode::ZSample zs;
    fold::decode::plan_reference_sample(L, zs, c.heavy.data());
    std::vector<bool> sampled(L, false);
    for (int i = 0; i < zs.n; ++i) sampled[zs.key[i]] = true;
    int cut = 0, plain = 0, vplain = 0;
    for (int j = 0; j < L; ++j) {
      const uint8_t vd = verdicts[0][j];
      const bool kb_free = !sampled[j];
      const int64_t r = (static_cast<int64_t>(c.pt[j / c.page]) * Hk * c.page + j % c.page) * D;
      for (int d = 0; d < D; ++d) {
        if (!(vd & 1)) {  // cut: flip V (the page V sums are left as they were)
          if (v8) {
            c.va[r + d] ^= 0x80;
            c.vb[r + d] ^= 0x80;
          } else {
            c.v[r + d].bits ^= 0x8000;
          }
          if (kb_free) c.kb[r + d] = static_cast<int8_t>(-c.kb[r + d]);
        } else if (!(vd & 2) && kb_free) {
          c.kb[r + d] = static_cast<int8_t>(127 - c.kb[r + d]);  // plane B of K not read
        }
        if ((vd & 1) && !(vd & 4) && v8) c.vb[r + d] ^= 0x80;  // plane B of V not read
      }
      cut += !(vd & 1);
      plain += (vd & 1) && !(vd & 2);
      vplain += v8 && (vd & 1) && !(vd & 4);
    }
    ASSERT_GT(cut, L / 10);
    ASSERT_GT(plain, 0);
    if (v8) {
      ASSERT_GT(vplain, 0);
    }
    const Step after = run(c, H, {x.q}, 12.0f, &hooks);
    ASSERT_EQ(std::memcmp(before.out.data(), after.out.data(), before.out.size() * 2), 0);
    ASSERT_EQ(std::memcmp(before.lse.data(), after.lse.data(), before.lse.size() * 4), 0);
  }
}

TEST(DecodeStep, CutMassKeepsTheNormalisation) {
  // Depth 2 cuts almost every key; the LSE (which is Z + log2 T) stays right because
  // the cut keys' coarse weights are in T, and the output moves only toward mean(V).
  const int L = 1200, H = 4, Hk = 1, D = 64;
  const Data x = make_data(L, H, Hk, D, 13, 0.5f, 1.0f);
  std::vector<double> ref, lse;
  reference(x, L, H, Hk, D, ref, lse);
  Cache c(1, Hk, D, 1200);
  c.fill(0, x.k, x.v, L);
  const Step s = run(c, H, {x.q}, 2.0f);
  EXPECT_LT(double(s.stats.live_keys) / s.stats.keys, 0.2);
  for (int h = 0; h < H; ++h) EXPECT_NEAR(s.lse[h], lse[h], 2e-2);
  EXPECT_LT(rel_err(s, 0, H, D, ref), 0.05);
}

TEST(DecodeStep, BitIdenticalAloneAndInAnyBatch) {
  const int H = 12, Hk = 2, D = 128;  // group size 6
  const Data a = make_data(1100, H, Hk, D, 21), b = make_data(700, H, Hk, D, 22),
             d = make_data(1300, H, Hk, D, 23);
  Cache alone(1, Hk, D, 1400);
  alone.fill(0, a.k, a.v, 1100);
  Cache batch(3, Hk, D, 1400, false, 40);
  batch.next_page = 3;  // different pages from the lone cache
  batch.fill(2, d.k, d.v, 1300);
  batch.fill(0, b.k, b.v, 700);
  batch.fill(1, a.k, a.v, 1100);
  const Step s1 = run(alone, H, {a.q}, 16.0f);
  setenv("FOLD_CPU_THREADS", "1", 1);
  const Step s3 = run(batch, H, {b.q, a.q, d.q}, 16.0f);
  setenv("FOLD_CPU_THREADS", "3", 1);
  const Step s3b = run(batch, H, {b.q, a.q, d.q}, 16.0f);
  unsetenv("FOLD_CPU_THREADS");
  ASSERT_EQ(std::memcmp(s1.out.data(), &s3.out[H * D], H * D * 2), 0);
  ASSERT_EQ(std::memcmp(s1.lse.data(), &s3.lse[H], H * 4), 0);
  ASSERT_EQ(std::memcmp(s3.out.data(), s3b.out.data(), s3.out.size() * 2), 0);
}

TEST(DecodeStep, HeavyKeysTrackTheLargestScales) {
  const int L = 700, H = 2, Hk = 2, D = 64;
  const Data x = make_data(L, H, Hk, D, 61);
  Cache c(1, Hk, D, 1024);
  c.fill(0, std::vector<float>(x.k.begin(), x.k.begin() + 300 * Hk * D),
         std::vector<float>(x.v.begin(), x.v.begin() + 300 * Hk * D), 300);
  fold_kvcache_t desc = c.desc();
  std::vector<bf16_t> kh(400 * Hk * D), vh(kh.size());
  for (size_t i = 0; i < kh.size(); ++i) {
    kh[i] = fold::bf16_from_float(x.k[300 * Hk * D + i]);
    vh[i] = fold::bf16_from_float(x.v[300 * Hk * D + i]);
  }
  ASSERT_EQ(fold_kvcache_append_cpu(&desc, 0, 400, fold_tensor_t{kh.data(), 0, Hk * D, D},
                                    fold_tensor_t{vh.data(), 0, Hk * D, D}),
            FOLD_OK);
  for (int h = 0; h < Hk; ++h) {
    // Expected: keys sorted by scale bits (desc), then index (asc); the first eight.
    std::vector<std::pair<int, int>> order;
    for (int j = 0; j < L; ++j)
      order.push_back(
          {-static_cast<int>(
               c.ks[(static_cast<size_t>(c.pt[j / c.page]) * Hk + h) * c.page + j % c.page]),
           j});
    std::sort(order.begin(), order.end());
    for (int i = 0; i < FOLD_DECODE_HEAVY_KEYS; ++i)
      EXPECT_EQ(c.heavy[h * FOLD_DECODE_HEAVY_KEYS + i], order[i].second) << h << " " << i;
  }
}

TEST(DecodeStep, HeavyEntriesOutsideTheLengthAreIgnored) {
  // A hand-made cache may hold heavy-list entries >= the request's length (a stale page, or
  // past the page table): the decode ignores them and an append treats them as empty.
  const int L = 900, H = 4, Hk = 1, D = 64;
  const Data x = make_data(L + 1, H, Hk, D, 71);
  Cache clean(1, Hk, D, 1024), bad(1, Hk, D, 1024);
  clean.fill(0, x.k, x.v, L);
  bad.fill(0, x.k, x.v, L);
  for (int e = 5; e < FOLD_DECODE_HEAVY_KEYS; ++e) clean.heavy[e] = -1;
  bad.heavy = clean.heavy;
  bad.heavy[5] = L;        // the next key's slot: not written yet
  bad.heavy[6] = 1 << 30;  // beyond the page table
  bad.heavy[7] = -7;
  const Step a = run(clean, H, {x.q}, 12.0f);
  const Step b = run(bad, H, {x.q}, 12.0f);
  ASSERT_EQ(std::memcmp(a.out.data(), b.out.data(), a.out.size() * 2), 0);
  ASSERT_EQ(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4), 0);
  // An append drops them (as empty entries) and reads no key at or past the length.
  std::vector<bf16_t> kh(Hk * D), vh(Hk * D);
  for (int i = 0; i < Hk * D; ++i) {
    kh[i] = fold::bf16_from_float(x.k[static_cast<size_t>(L) * Hk * D + i]);
    vh[i] = fold::bf16_from_float(x.v[static_cast<size_t>(L) * Hk * D + i]);
  }
  for (Cache *c : {&clean, &bad}) {
    fold_kvcache_t desc = c->desc();
    ASSERT_EQ(fold_kvcache_append_cpu(&desc, 0, 1, fold_tensor_t{kh.data(), 0, Hk * D, D},
                                      fold_tensor_t{vh.data(), 0, Hk * D, D}),
              FOLD_OK);
  }
  EXPECT_EQ(bad.heavy, clean.heavy);
}

TEST(DecodeStep, SplitsAddUp) {
  // Any split size gives the same result up to fp32 summation order.
  const int L = 1000, H = 4, Hk = 1, D = 64;
  const Data x = make_data(L, H, Hk, D, 31);
  Cache c(1, Hk, D, 1024);
  c.fill(0, x.k, x.v, L);
  fold::cpu::DecodeHooks h512, h64;
  h64.split_keys = 64;
  const Step a = run(c, H, {x.q}, 12.0f, &h512), b = run(c, H, {x.q}, 12.0f, &h64);
  for (int i = 0; i < H * D; ++i) EXPECT_NEAR(to_float(a.out[i]), to_float(b.out[i]), 2e-2);
  for (int h = 0; h < H; ++h) EXPECT_NEAR(a.lse[h], b.lse[h], 1e-5);
}

TEST(DecodeStep, GuardRecomputesRowsOutsideTheWindow) {
  const int L = 800, H = 4, Hk = 1, D = 64;
  const Data x = make_data(L, H, Hk, D, 41);
  std::vector<double> ref, lse;
  reference(x, L, H, Hk, D, ref, lse);
  Cache c(1, Hk, D, 800);
  c.fill(0, x.k, x.v, L);
  for (float off : {-40.0f, 40.0f, -70.0f, 200.0f, -200.0f}) {
    fold::cpu::DecodeHooks hooks;
    hooks.z_offset = off;
    const Step s = run(c, H, {x.q}, 16.0f, &hooks);
    // This data's sampled Z already sits ~20 binades below the LSE (heavy keys the sample
    // misses): T ~ 2^20 is inside a bf16 cache's window, the weights are exact and only more
    // keys stay live. -40 may or may not leave the window; every other offset does.
    if (off != -40.0f) {
      EXPECT_EQ(s.stats.fixup_rows, H) << off;
    }
    for (int i = 0; i < H * D; ++i) ASSERT_TRUE(std::isfinite(to_float(s.out[i])));
    EXPECT_LT(rel_err(s, 0, H, D, ref), 2.0 * floor_err(ref) + 1e-3) << off;
    for (int h = 0; h < H; ++h) EXPECT_NEAR(s.lse[h], lse[h], 1e-2);
    hooks.guard = false;  // unguarded: wrong, but still never NaN/inf
    const Step u = run(c, H, {x.q}, 16.0f, &hooks);
    for (int i = 0; i < H * D; ++i) ASSERT_TRUE(std::isfinite(to_float(u.out[i])));
  }
}

TEST(DecodeStep, V8ExponentGrowsInsteadOfClipping) {
  const int H = 2, Hk = 1, D = 64, L = 200;
  Data x = make_data(L, H, Hk, D, 51, 1.0f, 0.0f);
  for (int j = 100; j < L; ++j)
    for (int d = 0; d < D; ++d) x.v[j * D + d] *= 1000.0f;  // far beyond 7x headroom
  Cache c(1, Hk, D, 256, true);
  c.fill(0, std::vector<float>(x.k.begin(), x.k.begin() + 100 * D),
         std::vector<float>(x.v.begin(), x.v.begin() + 100 * D), 100);
  const int first = c.vexp[0];
  fold_kvcache_t desc = c.desc();
  std::vector<bf16_t> kh(100 * D), vh(100 * D);
  for (int i = 0; i < 100 * D; ++i) {
    kh[i] = fold::bf16_from_float(x.k[100 * D + i]);
    vh[i] = fold::bf16_from_float(x.v[100 * D + i]);
  }
  ASSERT_EQ(fold_kvcache_append_cpu(&desc, 0, 100, fold_tensor_t{kh.data(), 0, D, D},
                                    fold_tensor_t{vh.data(), 0, D, D}),
            FOLD_OK);
  EXPECT_GE(c.vexp[0], first + 9);
  for (int j = 0; j < L; ++j)
    for (int d = 0; d < D; ++d) {
      const float v = bf(x.v[j * D + d]);
      const float got = fold::decode::v8_value(c.va[j * D + d], c.vb[j * D + d], c.vexp[0], true);
      ASSERT_NEAR(got, v, std::fabs(v) * 0.01f + std::ldexp(1.0f, c.vexp[0] - 9)) << j;
    }
  // A fixed exponent does not grow: the same append is refused and nothing changes.
  Cache f(1, Hk, D, 256, true);
  f.vexp[0] = -4;
  f.len[0] = 0;
  f.pt[0] = 0;
  f.pt[1] = 1;
  f.pt[2] = 2;
  fold_kvcache_t fd = f.desc();
  fd.v_exp_fixed = 1;
  ASSERT_EQ(fold_kvcache_append_cpu(&fd, 0, 100, fold_tensor_t{kh.data(), 0, D, D},
                                    fold_tensor_t{vh.data(), 0, D, D}),
            FOLD_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fold_last_error()).find("v_scale"), std::string::npos) << fold_last_error();
  EXPECT_EQ(f.len[0], 0);
}

TEST(DecodeStep, ValidationNamesTheArgument) {
  const int D = 64;
  Cache c(2, 1, D, 100);
  std::vector<float> k(100 * D, 0.5f), v(100 * D, 1.0f);
  c.fill(0, k, v, 100);
  std::vector<bf16_t> one(2 * D, fold::bf16_from_float(1.0f));
  fold_kvcache_t desc = c.desc();
  auto expect_error = [](fold_status_t st, const char *needle) {
    EXPECT_EQ(st, FOLD_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(fold_last_error()).find(needle), std::string::npos) << fold_last_error();
  };
  // A full request.
  expect_error(fold_kvcache_append_cpu(&desc, 0, 1, fold_tensor_t{one.data(), 0, D, D},
                                       fold_tensor_t{one.data(), 0, D, D}),
               "full");
  // A free slot.
  expect_error(fold_kvcache_append_cpu(&desc, 1, 1, fold_tensor_t{one.data(), 0, D, D},
                                       fold_tensor_t{one.data(), 0, D, D}),
               "not active");
  // Non-finite values.
  c.len[1] = 0;
  c.pt[c.ppr] = c.next_page;
  std::vector<bf16_t> bad = one;
  bad[3] = fold::bf16_from_float(NAN);
  desc = c.desc();
  expect_error(fold_kvcache_append_cpu(&desc, 1, 1, fold_tensor_t{bad.data(), 0, D, D},
                                       fold_tensor_t{one.data(), 0, D, D}),
               "k holds a non-finite");
  EXPECT_EQ(c.len[1], 0);
  // Lengths beyond max_len, bad head_dim, bad page.
  fold_kvcache_t d2 = desc;
  c.len[1] = 101;
  expect_error(fold_kvcache_append_cpu(&d2, 1, 1, fold_tensor_t{one.data(), 0, D, D},
                                       fold_tensor_t{one.data(), 0, D, D}),
               "lengths[1]");
  c.len[1] = 0;
  d2.head_dim = 96;
  expect_error(fold_kvcache_append_cpu(&d2, 1, 1, fold_tensor_t{one.data(), 0, D, D},
                                       fold_tensor_t{one.data(), 0, D, D}),
               "head_dim");
  c.pt[c.ppr] = 1000;
  expect_error(fold_kvcache_append_cpu(&desc, 1, 1, fold_tensor_t{one.data(), 0, D, D},
                                       fold_tensor_t{one.data(), 0, D, D}),
               "page_table[1][0]");
  // Decode parameters.
  std::vector<bf16_t> q(2 * 65 * D), out(q.size());
  fold_decode_params_t p = params(65, 16.0f);
  p.softmax_scale = 0.125f;
  const fold_tensor_t none{nullptr, 0, 0, 0};
  expect_error(fold_decode_cpu(&desc, &p, fold_tensor_t{q.data(), 65 * D, 0, D}, none, none,
                               fold_tensor_t{out.data(), 65 * D, 0, D}, nullptr, nullptr),
               "group size");
  p.n_heads = 2;
  p.depth = -1;
  expect_error(fold_decode_cpu(&desc, &p, fold_tensor_t{q.data(), 2 * D, 0, D}, none, none,
                               fold_tensor_t{out.data(), 2 * D, 0, D}, nullptr, nullptr),
               "depth");
}

// Session 39's C ABI audit: pages of the keys already in the cache, a zero-token append's
// request, v8 exponents, views whose extent wraps the address space, misaligned rows.
TEST(DecodeStep, ValidationCoversTheWholeCacheAndTheViewsExtents) {
  const int D = 64;
  auto expect_error = [](fold_status_t st, const char *needle) {
    EXPECT_EQ(st, FOLD_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(fold_last_error()).find(needle), std::string::npos) << fold_last_error();
  };
  std::vector<bf16_t> one(2 * D, fold::bf16_from_float(1.0f));
  const fold_tensor_t row{one.data(), 0, D, D};
  for (const bool v8 : {false, true}) {
    Cache c(2, 1, D, 200, v8);
    std::vector<float> k(70 * D, 0.5f), v(70 * D, 1.0f);
    c.fill(0, k, v, 70);
    fold_kvcache_t desc = c.desc();
    // A page of tokens already there (read by the heavy-key list and a v8 re-scale) outside the
    // pool: refused before anything is read or written (it was read out of bounds).
    const int32_t saved = c.pt[0];
    c.pt[0] = 1000000;
    expect_error(fold_kvcache_append_cpu(&desc, 0, 1, row, row), "page_table[0][0]");
    EXPECT_EQ(c.len[0], 70);
    c.pt[0] = saved;
    // A zero-token append still names a bad or free request.
    expect_error(fold_kvcache_append_cpu(&desc, 7, 0, row, row), "out of range");
    expect_error(fold_kvcache_append_cpu(&desc, 1, 0, row, row), "not active");
    if (v8) {
      const int32_t e = c.vexp[0];
      for (const int32_t bad : {300, -300, 2147483647}) {
        c.vexp[0] = bad;
        expect_error(fold_kvcache_append_cpu(&desc, 0, 1, row, row), "v_exp[0]");
      }
      c.vexp[0] = e;
    }
    EXPECT_EQ(fold_kvcache_append_cpu(&desc, 0, 1, row, row), FOLD_OK) << fold_last_error();
  }
  Cache c(2, 1, D, 200);
  std::vector<float> k(70 * D, 0.5f), v(70 * D, 1.0f);
  c.fill(0, k, v, 70);
  fold_kvcache_t desc = c.desc();
  std::vector<bf16_t> q(2 * 2 * D + 1), out(2 * 2 * D);
  fold_decode_params_t p = params(2, 16.0f);
  p.softmax_scale = 0.125f;
  const fold_tensor_t none{nullptr, 0, 0, 0};
  const fold_tensor_t ot{out.data(), 2 * D, 0, D};
  // Request 1's q row 2^62 elements (2^63 bytes) on: the byte address wraps.
  expect_error(fold_decode_cpu(&desc, &p, fold_tensor_t{q.data(), int64_t{1} << 62, 0, D}, none,
                               none, ot, nullptr, nullptr),
               "overflows the address space");
  expect_error(fold_decode_cpu(&desc, &p, fold_tensor_t{q.data(), 2 * D, 0, INT64_MAX}, none, none,
                               ot, nullptr, nullptr),
               "overflows the address space");
  std::vector<bf16_t> kv(2 * D);
  expect_error(fold_decode_cpu(&desc, &p, fold_tensor_t{q.data(), 2 * D, 0, D},
                               fold_tensor_t{kv.data(), int64_t{1} << 62, 0, D},
                               fold_tensor_t{kv.data(), D, 0, D}, ot, nullptr, nullptr),
               "k_step: the view's extent");
  // An odd address for 16-bit values.
  const fold_tensor_t odd{reinterpret_cast<char *>(q.data()) + 1, 2 * D, 0, D};
  expect_error(fold_decode_cpu(&desc, &p, odd, none, none, ot, nullptr, nullptr), "2-byte aligned");
  std::vector<float> lse(8);
  expect_error(
      fold_decode_cpu(&desc, &p, fold_tensor_t{q.data(), 2 * D, 0, D}, none, none, ot,
                      reinterpret_cast<float *>(reinterpret_cast<char *>(lse.data()) + 2), nullptr),
      "lse must be 4-byte aligned");
  EXPECT_EQ(fold_decode_cpu(&desc, &p, fold_tensor_t{q.data(), 2 * D, 0, D}, none, none, ot,
                            lse.data(), nullptr),
            FOLD_OK)
      << fold_last_error();
  // The workspace size of a cache the step would refuse: 0, with the reason.
  fold_kvcache_t bad = desc;
  bad.n_kv_heads = -1;
  EXPECT_EQ(fold_decode_cuda_workspace_size(&bad, 2), size_t{0});
  EXPECT_NE(std::string(fold_last_error()).find("n_kv_heads"), std::string::npos);
  fold_kvcache_t longest = desc;
  longest.max_len = 2147483647;  // (the splits' count was int32 arithmetic that overflowed)
  longest.pages_per_request = static_cast<int32_t>((int64_t{2147483647} + 63) / 64);
  EXPECT_GT(fold_decode_cuda_workspace_size(&longest, 2), size_t{0}) << fold_last_error();
}

}  // namespace
