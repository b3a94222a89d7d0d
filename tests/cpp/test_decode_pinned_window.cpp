// A cache pinned to one sliding window (fold_kvcache_t::pinned_window, decode.h): its writers
// forget each request's keys before kept(L), so the pages below kept(L) can be released. The
// tests: kept() and the heavy list's forgetting; a pinned cache whose early pages were released
// (page-table entries -1, the pages' contents scrambled) gives the bits of one whose pages were
// kept, through chunked appends, steps that append and a v8 re-scale; the list does not depend
// on how the tokens were grouped into appends; the accuracy over the window and over narrower
// ones; the checks (a step with a wider window, a released page the call would read).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "decode/pinned_window.h"
#include "decode_run.h"
#include "fold_attention/decode.h"

namespace {

using namespace fold::test::dec;
using fold::decode::heavy_forget_before;
using fold::decode::pinned_kept;

constexpr int kHeavy = FOLD_DECODE_HEAVY_KEYS;

TEST(PinnedWindow, KeptIsThePageOfTheWindowsFirstKey) {
  EXPECT_EQ(pinned_kept(1000, 0, 64), 0);    // not pinned
  EXPECT_EQ(pinned_kept(128, 128, 64), 0);   // the window holds every key
  EXPECT_EQ(pinned_kept(129, 128, 64), 0);   // key 1 is on page 0
  EXPECT_EQ(pinned_kept(192, 128, 64), 64);  // key 64 starts page 1
  EXPECT_EQ(pinned_kept(255, 128, 64), 64);
  EXPECT_EQ(pinned_kept(1000, 100, 256), 768);
  EXPECT_EQ(pinned_kept(1000, 1, 64), 960);  // key 999's page
}

TEST(PinnedWindow, HeavyListForgetsInOrder) {
  int32_t idx[kHeavy] = {50, 3, 70, 10, 64, -1, -1, -1};
  uint16_t sc[kHeavy] = {9, 8, 7, 6, 5, 0, 0, 0};
  heavy_forget_before<kHeavy>(idx, sc, 64);
  const int32_t want_idx[kHeavy] = {70, 64, -1, -1, -1, -1, -1, -1};
  const uint16_t want_sc[kHeavy] = {7, 5, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(std::memcmp(idx, want_idx, sizeof idx), 0);
  EXPECT_EQ(std::memcmp(sc, want_sc, sizeof sc), 0);
  int32_t same[kHeavy] = {5, -1, 9, 2, -1, -1, -1, -1};  // first 0: nothing moves
  int32_t copy[kHeavy];
  std::memcpy(copy, same, sizeof same);
  heavy_forget_before<kHeavy>(same, nullptr, 0);
  EXPECT_EQ(std::memcmp(same, copy, sizeof same), 0);
}

std::vector<fold::bf16_t> bf16_rows(const std::vector<float> &x, size_t from, size_t n) {
  std::vector<fold::bf16_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = fold::bf16_from_float(x[from + i]);
  return out;
}

// Appends tokens [from, from + n) of x to slot 0.
void append(Cache &c, const Data &x, int from, int n) {
  const size_t row = static_cast<size_t>(c.Hk) * c.D;
  auto k = bf16_rows(x.k, from * row, n * row), v = bf16_rows(x.v, from * row, n * row);
  fold_kvcache_t d = c.desc();
  ASSERT_EQ(fold_kvcache_append_cpu(&d, 0, n, fold_tensor_t{k.data(), 0, c.Hk * c.D, c.D},
                                    fold_tensor_t{v.data(), 0, c.Hk * c.D, c.D}),
            FOLD_OK)
      << fold_last_error();
}

// Releases slot 0's pages below kept(L): their entries become -1 and their contents garbage
// (as if another request had taken them).
void release_early_pages(Cache &c) {
  const int first = pinned_kept(c.len[0], c.pinned, c.page) / c.page;
  for (int i = 0; i < first; ++i) {
    int32_t &e = c.pt[i];
    if (e < 0) continue;
    const size_t rows = static_cast<size_t>(c.Hk) * c.page, base = e * rows;
    for (size_t r = base; r < base + rows; ++r) {
      c.ks[r] = 0x7f00;  // a huge scale: a heavy list that read it would change
      for (int d = 0; d < c.D; ++d) {
        const size_t j = r * c.D + d;
        c.ka[j] = 127;
        c.kb[j] = -128;
        if (c.v8) {
          c.va[j] = 0x7e;
          c.vb[j] = 0x7e;
        } else {
          c.v[j].bits = 0x7f00;
        }
      }
    }
    e = -1;
  }
}

// A request appended in uneven chunks, with a step after each chunk; the value scale grows late
// (v8 re-scale) when `grow`.
struct Played {
  std::vector<Step> steps;
  std::vector<int32_t> heavy;
};

constexpr int kH = 8, kHk = 2, kD = 64, kL = 1400;

Data play_data(bool grow) {
  Data x = make_data(kL, kH, kHk, kD, 91);
  if (grow)  // one late token 16x larger than the rest: the v8 exponent grows there
    for (int d = 0; d < kD; ++d) x.v[(static_cast<size_t>(1200) * kHk + 1) * kD + d] *= 16.0f;
  return x;
}

Played play(bool v8, bool release, int w, const std::vector<int> &chunks, bool grow) {
  const int H = kH, Hk = kHk, D = kD;
  const Data x = play_data(grow);
  Cache c(1, Hk, D, kL, v8);
  c.pinned = w;
  c.len[0] = 0;
  for (int i = 0; i < c.ppr; ++i) c.pt[i] = i;
  Played out;
  int at = 0;
  for (int n : chunks) {
    append(c, x, at, n);
    at += n;
    if (release) release_early_pages(c);
    out.steps.push_back(run(c, H, {x.q}, 16.0f, nullptr, w));
  }
  out.heavy = c.heavy;
  return out;
}

void expect_same(const Played &a, const Played &b, const std::string &what) {
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_EQ(std::memcmp(a.steps[i].out.data(), b.steps[i].out.data(), a.steps[i].out.size() * 2),
              0)
        << what << " step " << i;
    EXPECT_EQ(std::memcmp(a.steps[i].lse.data(), b.steps[i].lse.data(), a.steps[i].lse.size() * 4),
              0)
        << what << " step " << i;
  }
  EXPECT_EQ(a.heavy, b.heavy) << what;
}

TEST(PinnedWindow, ReleasedPagesGiveTheBitsOfKeptPages) {
  const std::vector<int> chunks = {300, 1, 1, 250, 64, 1, 500, 1, 1, 200};
  for (bool v8 : {false, true})
    for (int w : {1, 100, 128, 500})
      expect_same(play(v8, false, w, chunks, v8), play(v8, true, w, chunks, v8),
                  "v8 " + std::to_string(v8) + " w " + std::to_string(w));
}

TEST(PinnedWindow, HeavyListDoesNotDependOnTheAppendsGrouping) {
  // The list (and so Z and the output) after the same tokens, appended at once or token by token.
  const int w = 100;
  const Played whole = play(false, true, w, {1300}, false);
  const Played ones = play(false, true, w, std::vector<int>(1300, 1), false);
  EXPECT_EQ(whole.heavy, ones.heavy);
  const Step &a = whole.steps.back(), &b = ones.steps.back();
  EXPECT_EQ(std::memcmp(a.out.data(), b.out.data(), a.out.size() * 2), 0);
  // Every entry is a key the cache keeps.
  for (int32_t e : whole.heavy) EXPECT_TRUE(e < 0 || e >= pinned_kept(1300, w, 64)) << e;
  // v8 with its scale growing at token 1200: the list is K's alone, whatever the grouping (the V
  // exponents, chosen per append, may differ).
  const Played whole8 = play(true, true, w, {1300}, true);
  const Played parts8 = play(true, true, w, {700, 1, 1, 498, 100}, true);
  EXPECT_EQ(whole8.heavy, parts8.heavy);
  EXPECT_EQ(whole8.heavy, whole.heavy);
}

TEST(PinnedWindow, AccuracyAgainstFloat64OverTheWindow) {
  const int L = 1300, H = kH, Hk = kHk, D = kD;
  const Data x = play_data(false);
  for (int w : {64, 300}) {
    const Played p = play(false, true, w, {L}, false);
    std::vector<double> ref, lse;
    reference(x, L, H, Hk, D, ref, lse, L - w);
    EXPECT_LT(rel_err(p.steps.back(), 0, H, D, ref), 2.0 * floor_err(ref) + 1e-6) << w;
  }
}

TEST(PinnedWindow, NarrowerWindowsReadOnlyKeptKeys) {
  // A step may take a window narrower than the pinned one (a chunk's tokens after a request's
  // history do): with the early pages released and scrambled, its output is accurate over its
  // own window.
  const int L = 1300, H = kH, Hk = kHk, D = kD, w = 300;
  const Data x = play_data(false);
  Cache c(1, Hk, D, kL);
  c.pinned = w;
  c.fill(0, x.k, x.v, L);
  release_early_pages(c);
  ASSERT_EQ(c.pt[0], -1);
  for (int narrow : {1, 37, 299, 300}) {
    SCOPED_TRACE(narrow);
    const Step s = run(c, H, {x.q}, 16.0f, nullptr, narrow);
    std::vector<double> ref, lse;
    reference(x, L, H, Hk, D, ref, lse, L - narrow);
    EXPECT_LT(rel_err(s, 0, H, D, ref), 2.0 * floor_err(ref) + 1e-6);
  }
}

TEST(PinnedWindow, ChecksNameTheWindowAndTheReleasedPage) {
  const int L = 700, H = 4, Hk = 2, D = 64, w = 200;
  const Data x = make_data(L, H, Hk, D, 93);
  Cache c(1, Hk, D, 1024);
  c.pinned = w;
  c.fill(0, x.k, x.v, L);
  release_early_pages(c);  // kept(700) = 448: pages 0..6 released
  ASSERT_EQ(c.pt[6], -1);
  ASSERT_GE(c.pt[7], 0);
  // A step with a wider window (or none) would read keys the cache forgot.
  std::vector<fold::bf16_t> q = bf16_rows(x.q, 0, static_cast<size_t>(H) * D);
  std::vector<fold::bf16_t> out(static_cast<size_t>(H) * D);
  std::vector<float> lse(H);
  const fold_tensor_t none{nullptr, 0, 0, 0};
  for (int other : {0, 201, 700}) {
    SCOPED_TRACE(other);
    fold_decode_params_t p = params(H, 16.0f);
    p.softmax_scale = 0.125f;
    p.window_before = other;
    fold_kvcache_t d = c.desc();
    EXPECT_EQ(fold_decode_cpu(&d, &p, fold_tensor_t{q.data(), H * D, 0, D}, none, none,
                              fold_tensor_t{out.data(), H * D, 0, D}, lse.data(), nullptr),
              FOLD_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(fold_last_error()).find("cache->pinned_window = 200"), std::string::npos)
        << fold_last_error();
  }
  // A released page the call would read is refused (page 7 holds key 500 = L - w).
  c.pt[7] = -1;
  std::vector<fold::bf16_t> k = bf16_rows(x.k, 0, static_cast<size_t>(Hk) * D);
  fold_kvcache_t d = c.desc();
  EXPECT_EQ(fold_kvcache_append_cpu(&d, 0, 1, fold_tensor_t{k.data(), 0, Hk * D, D},
                                    fold_tensor_t{k.data(), 0, Hk * D, D}),
            FOLD_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fold_last_error()).find("page_table[0][7] = -1"), std::string::npos)
      << fold_last_error();
  d.pinned_window = -1;
  EXPECT_EQ(fold_kvcache_append_cpu(&d, 0, 1, fold_tensor_t{k.data(), 0, Hk * D, D},
                                    fold_tensor_t{k.data(), 0, Hk * D, D}),
            FOLD_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fold_last_error()).find("pinned_window"), std::string::npos);
}

}  // namespace
