// Sliding windows in the decode CPU reference (fold_decode_params_t.window_before): the step's
// query (position L - 1) sees keys [L - w, L) only. Accuracy against float64 over the window's
// keys, keys before the window never read, windows that hide nothing keep the bits of no window,
// a request's bits alone and in a batch, the guard's recomputation over the window, validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "decode_run.h"
#include "fold_attention/decode.h"

namespace {

using namespace fold::test::dec;

int first_key(int L, int w) { return w > 0 && L > w ? L - w : 0; }

TEST(DecodeWindow, AccuracyAgainstFloat64OverTheWindow) {
  const int L = 1500, H = 8, Hk = 2, D = 64;
  const Data x = make_data(L, H, Hk, D, 71);
  for (bool v8 : {false, true}) {
    Cache c(1, Hk, D, 1536, v8);
    c.fill(0, x.k, x.v, L);
    // Windows inside one split, across split and page boundaries, the whole request and more.
    for (int w : {1, 2, 63, 100, 511, 512, 513, 1000, 1499}) {
      std::vector<double> ref, lse;
      reference(x, L, H, Hk, D, ref, lse, first_key(L, w));
      const double floor = floor_err(ref);
      for (float depth : {0.0f, 16.0f}) {
        const Step s = run(c, H, {x.q}, depth, nullptr, w);
        const double e = rel_err(s, 0, H, D, ref);
        double lse_err = 0;
        for (int h = 0; h < H; ++h) lse_err = std::max(lse_err, std::fabs(s.lse[h] - lse[h]));
        EXPECT_LT(e, 2.0 * floor + 1e-6) << "v8 " << v8 << " window " << w << " depth " << depth;
        EXPECT_LT(lse_err, 1e-3) << "v8 " << v8 << " window " << w << " depth " << depth;
        // Only the window's keys are counted (and read).
        EXPECT_EQ(s.stats.keys, static_cast<int64_t>(Hk) * (L - first_key(L, w)));
      }
    }
  }
}

TEST(DecodeWindow, KeysBeforeTheWindowAreNeverRead) {
  const int L = 1300, H = 4, Hk = 2, D = 128;
  const Data x = make_data(L, H, Hk, D, 72);
  for (bool v8 : {false, true})
    for (int w : {200, 700, 777}) {
      Cache c(1, Hk, D, 1344, v8);
      c.fill(0, x.k, x.v, L);
      const Step before = run(c, H, {x.q}, 16.0f, nullptr, w);
      // Scramble every plane of the keys before the window (K planes, K scales, V); the page V
      // sums stay as they were (the window's first page keeps its sum over all its tokens).
      const int f = first_key(L, w);
      for (int j = 0; j < f; ++j)
        for (int h = 0; h < Hk; ++h) {
          const int64_t row =
              (static_cast<int64_t>(c.pt[j / c.page]) * Hk + h) * c.page + j % c.page;
          c.ks[row] ^= 0x4000;
          for (int d = 0; d < D; ++d) {
            const int64_t r = row * D + d;
            c.ka[r] = static_cast<int8_t>(~c.ka[r]);
            c.kb[r] = static_cast<int8_t>(~c.kb[r]);
            if (v8) {
              c.va[r] ^= 0x5a;
              c.vb[r] ^= 0x5a;
            } else {
              c.v[r].bits ^= 0x7fff;
            }
          }
        }
      const Step after = run(c, H, {x.q}, 16.0f, nullptr, w);
      ASSERT_EQ(std::memcmp(before.out.data(), after.out.data(), before.out.size() * 2), 0)
          << "v8 " << v8 << " window " << w;
      ASSERT_EQ(std::memcmp(before.lse.data(), after.lse.data(), before.lse.size() * 4), 0);
    }
}

TEST(DecodeWindow, AWindowThatHidesNothingKeepsTheBitsOfNoWindow) {
  const int L = 1100, H = 6, Hk = 2, D = 64;
  const Data x = make_data(L, H, Hk, D, 73);
  Cache c(1, Hk, D, 1280);
  c.fill(0, x.k, x.v, L);
  for (float depth : {0.0f, 12.0f}) {
    const Step none = run(c, H, {x.q}, depth);
    for (int w : {L, L + 1, 1280, 1 << 30}) {
      const Step s = run(c, H, {x.q}, depth, nullptr, w);
      ASSERT_EQ(std::memcmp(none.out.data(), s.out.data(), none.out.size() * 2), 0) << w;
      ASSERT_EQ(std::memcmp(none.lse.data(), s.lse.data(), none.lse.size() * 4), 0) << w;
    }
  }
}

TEST(DecodeWindow, BitIdenticalAloneAndInABatch) {
  const int H = 8, Hk = 2, D = 64;
  const Data a = make_data(1000, H, Hk, D, 74), b = make_data(300, H, Hk, D, 75),
             d = make_data(1200, H, Hk, D, 76);
  Cache alone(1, Hk, D, 1280);
  alone.fill(0, a.k, a.v, 1000);
  Cache batch(3, Hk, D, 1280, false, 20);
  batch.next_page = 5;
  batch.fill(2, d.k, d.v, 1200);
  batch.fill(0, b.k, b.v, 300);
  batch.fill(1, a.k, a.v, 1000);
  for (int w : {333, 640}) {
    const Step s1 = run(alone, H, {a.q}, 16.0f, nullptr, w);
    const Step s3 = run(batch, H, {b.q, a.q, d.q}, 16.0f, nullptr, w);
    ASSERT_EQ(std::memcmp(s1.out.data(), &s3.out[H * D], H * D * 2), 0) << w;
    ASSERT_EQ(std::memcmp(s1.lse.data(), &s3.lse[H], H * 4), 0) << w;
  }
}

TEST(DecodeWindow, TheGuardRecomputesOverTheWindow) {
  // A Z far off (the hook) sends every row to the fix-up, whose exact LSE must be the window's.
  const int L = 1400, H = 4, Hk = 1, D = 64, w = 450;
  const Data x = make_data(L, H, Hk, D, 77);
  std::vector<double> ref, lse;
  reference(x, L, H, Hk, D, ref, lse, first_key(L, w));
  Cache c(1, Hk, D, 1408);
  c.fill(0, x.k, x.v, L);
  for (float offset : {-70.0f, 200.0f}) {
    fold::cpu::DecodeHooks hooks;
    hooks.z_offset = offset;
    const Step s = run(c, H, {x.q}, 16.0f, &hooks, w);
    EXPECT_EQ(s.stats.fixup_rows, H) << offset;
    EXPECT_LT(rel_err(s, 0, H, D, ref), 2.0 * floor_err(ref)) << offset;
    for (int h = 0; h < H; ++h) EXPECT_NEAR(s.lse[h], lse[h], 1e-3) << offset;
  }
}

TEST(DecodeWindow, ValidationNamesTheArgument) {
  Cache c(1, 1, 64, 128);
  const Data x = make_data(10, 1, 1, 64, 78);
  c.fill(0, x.k, x.v, 10);
  std::vector<bf16_t> q(64, bf16_t{0}), out(64);
  fold_decode_params_t p = params(1, 0.0f);
  p.softmax_scale = 0.125f;
  p.window_before = -1;
  fold_kvcache_t desc = c.desc();
  const fold_tensor_t none{nullptr, 0, 0, 0};
  EXPECT_EQ(fold_decode_cpu(&desc, &p, fold_tensor_t{q.data(), 64, 0, 64}, none, none,
                            fold_tensor_t{out.data(), 64, 0, 64}, nullptr, nullptr),
            FOLD_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fold_last_error()).find("window_before"), std::string::npos)
      << fold_last_error();
}

}  // namespace
