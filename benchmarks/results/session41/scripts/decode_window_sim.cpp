// Host simulation of the CUDA decode's window ranges (helper of session 41, no device): the
// expressions of src/cuda/decode.cu's windowed instances (split_item<.., WIN>, the front's WIN
// slot placement, combine_item's first split, the fix-up and add_step_stats' ranges), copied
// here and checked against the CPU reference's rules (src/cpu/decode_step.cpp) over random
// (L, w, page size, heavy lists, cut patterns).
//   g++ -std=c++17 -O1 -fsanitize=address,undefined -I src -I include
//       benchmarks/results/session41/scripts/decode_window_sim.cpp -o /tmp/decode_window_sim
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <vector>

#include "decode/reference_z.h"

using namespace fold::decode;

namespace {

constexpr int kSplit = 512, kChunk = 64;

int32_t window_first(int32_t L, int32_t w) { return w > 0 && L > w ? L - w : 0; }

#define REQUIRE(x)                                                                       \
  do {                                                                                   \
    if (!(x)) {                                                                          \
      std::fprintf(stderr, "FAIL %s (line %d) L=%d w=%d P=%d\n", #x, __LINE__, L, w, P); \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

uint32_t page_starts(int32_t s0, int n, int P) {
  uint32_t m = 0u;
  int x = s0 % P;
  for (int i = 1; i < n; ++i) {
    x = x + kChunk == P ? 0 : x + kChunk;
    m |= (x == 0 ? 1u : 0u) << i;
  }
  return m;
}

struct SplitTrace {
  std::vector<int32_t> keys;     // keys visited (present), in order
  std::vector<int32_t> flushes;  // last keys of the flushed pages, in order
  std::set<int32_t> pages_read;  // pages looked up in the page table (page index = key / P)
  bool ran = false;
};

// decode_step.cpp's pass(): per split, the keys and the page flushes (cut[j]: key j is cut).
std::vector<SplitTrace> cpu_splits(int32_t L, int32_t w, int P, const std::vector<char> &cut) {
  const int32_t F = w > 0 && L > w ? L - w : 0;  // Group::F_
  std::vector<SplitTrace> out((L + kSplit - 1) / kSplit);
  for (int32_t s0 = F - F % kSplit; s0 < L; s0 += kSplit) {
    SplitTrace &t = out[s0 / kSplit];
    t.ran = true;
    const int32_t s1 = std::min(L, s0 + kSplit);
    bool any_cut = false;
    auto flush = [&](int32_t last) {
      if (!any_cut) return;
      any_cut = false;
      t.flushes.push_back(last);
    };
    for (int32_t j = std::max(s0, F); j < s1; ++j) {
      if (j > s0 && j % P == 0) flush(j - 1);
      t.keys.push_back(j);
      if (cut[j]) any_cut = true;
    }
    flush(s1 - 1);
  }
  return out;
}

// split_item<NP, MMA, WIN = true>'s ranges for split s (every thread's view, serialised).
SplitTrace gpu_split(int32_t L, int32_t w, int P, int s, const std::vector<char> &cut) {
  SplitTrace t;
  const int32_t s0 = s * kSplit;
  if (s0 >= L) return t;
  const int32_t F = window_first(L, w);
  if (s0 + kSplit <= F) return t;
  t.ran = true;
  const int32_t s1 = std::min(L, s0 + kSplit);
  const int32_t lo = std::max(s0, F);
  const int ci0 = (lo - s0) / kChunk;
  const int32_t jf = s0 + ci0 * kChunk;
  const int nchunks = (s1 - s0 + kChunk - 1) / kChunk;
  std::vector<char> rowbase(kSplit / kChunk, 0), scale(kSplit, 0);
  for (int tid = 0; tid < 256; ++tid) {
    if (tid < nchunks && tid >= ci0) {
      rowbase[tid] = 1;
      t.pages_read.insert((s0 + tid * kChunk) / P);
    }
    if (tid < nchunks * 8 && tid >= ci0 * 8) {
      const int32_t j = s0 + (tid >> 3) * kChunk;  // key_row of the chunk, + 8 (tid & 7)
      t.pages_read.insert(j / P);
      for (int i = 0; i < 8; ++i) scale[(j - s0) + 8 * (tid & 7) + i] = 1;
    }
  }
  const uint32_t newpage = page_starts(s0, nchunks, P);
  auto chunk_row = [&](int32_t j0) {
    if (j0 > jf) {
      const int i = (j0 - s0) / kChunk;
      if (!rowbase[i]) {
        std::fprintf(stderr, "FAIL unwritten s_rowbase\n");
        std::exit(1);
      }
    } else {
      t.pages_read.insert(j0 / P);
    }
  };
  const int klo0 = lo - jf;  // the kernel's klo0: keys [0, klo0) of chunk ci0 before F
  // load_planes(jf) and stage_chunk(jf) before the loop (the first barrier: s_rowbase is not
  // ready yet, so chunk_row(jf) must take key_row).
  chunk_row(jf);
  REQUIRE(!(jf > jf));
  int n_pages = 0;
  bool page_has_cut = false;
  std::vector<int32_t> page_last;
  for (int ci = ci0; ci < nchunks; ++ci) {
    const int32_t j0 = s0 + ci * kChunk;
    const int nk = std::min(kChunk, s1 - j0);
    const int klo = ci == ci0 ? klo0 : 0;  // (the next chunks' loads take klo 0)
    REQUIRE(klo == std::max(0, lo - j0));
    REQUIRE(klo >= 0 && klo < nk);  // every visited chunk holds a window key
    if (ci > ci0) chunk_row(j0);    // load_planes / stage_chunk of the next chunk (loop's end)
    REQUIRE(rowbase[ci]);           // the gathers' s_rowbase[(j0 - s0) / 64]
    bool chunk_cut = false;
    // Screen layout: key kq = tid >> 2 (4 threads per key); MMA layout: 8 warp + 2 mt + j.
    std::vector<char> pres_screen(kChunk, 0), pres_mma(kChunk, 0);
    for (int tid = 0; tid < 256; ++tid) {
      const int kq = tid >> 2;
      pres_screen[kq] = kq >= klo && kq < nk;
      const int warp = tid >> 5, lane = tid & 31, mt = lane & 3;
      for (int j = 0; j < 2; ++j) {
        const int k = 8 * warp + 2 * mt + j;
        pres_mma[k] = k >= klo && k < nk;
      }
    }
    for (int k = 0; k < kChunk; ++k) {
      REQUIRE(pres_screen[k] == pres_mma[k]);
      if (pres_screen[k]) {
        REQUIRE(scale[j0 - s0 + k]);  // skj of a present key: its scale was copied
        t.keys.push_back(j0 + k);
        if (cut[j0 + k]) chunk_cut = true;
      }
    }
    // Dense MMA stage: rows [klo, nk) copied, [nk, 64) and [0, klo) zeroed: every row defined.
    for (int k = 0; k < kChunk; ++k) {
      const bool copied = k >= klo && k < nk;
      const bool zeroed = (nk < kChunk && k >= nk) || (klo > 0 && k < klo);
      REQUIRE(copied != zeroed);
    }
    // The fma path's row sums: keys [klo, nk) whichever branch.
    const bool new_page = ((newpage >> ((j0 - s0) / kChunk)) & 1u) != 0;
    if (new_page && page_has_cut) {
      page_last.push_back(j0 - 1);
      n_pages += 1;
    }
    if (new_page) page_has_cut = false;
    page_has_cut = page_has_cut || chunk_cut;
  }
  if (page_has_cut) {
    page_last.push_back(s1 - 1);
    n_pages += 1;
  }
  REQUIRE(n_pages <= kSplit / kChunk);
  t.flushes = page_last;
  return t;
}

void check_splits(int32_t L, int32_t w, int P, std::mt19937 &rng) {
  std::vector<char> cut(L);
  const int mode = rng() % 3;
  for (int32_t j = 0; j < L; ++j)
    cut[j] = mode == 0 ? 0 : mode == 1 ? (rng() % 2) : (rng() % 50 == 0);
  const auto cpu = cpu_splits(L, w, P, cut);
  const int32_t F = window_first(L, w);
  const int nsplit = (L + kSplit - 1) / kSplit;
  const int splits_ws = nsplit + static_cast<int>(rng() % 3);  // ws.splits >= the request's
  for (int s = 0; s < splits_ws; ++s) {
    const SplitTrace g = gpu_split(L, w, P, s, cut);
    if (s >= nsplit) {
      REQUIRE(!g.ran);
      continue;
    }
    REQUIRE(g.ran == cpu[s].ran);
    REQUIRE(g.keys == cpu[s].keys);
    REQUIRE(g.flushes == cpu[s].flushes);
    // Never a page wholly before the window: every page read holds a key >= F.
    for (int32_t pg : g.pages_read) REQUIRE((pg + 1) * P - 1 >= F && pg * P < L);
  }
  // combine_item<.., EXT>: the splits summed, [F / 512, nsplit), are exactly those that ran.
  const int s_first = F / kSplit;
  for (int s = 0; s < nsplit; ++s) REQUIRE((s >= s_first) == cpu[s].ran);
  // The fix-up's keys and add_step_stats' bytes: [F, L).
  int64_t keys = 0;
  for (const auto &t : cpu) keys += static_cast<int64_t>(t.keys.size());
  REQUIRE(keys == L - F);
}

// The front's WIN slot placement against plan_window_sample.
void check_front(int32_t L, int32_t w, std::mt19937 &rng) {
  [[maybe_unused]] const int P = 0;  // (REQUIRE's message)
  int32_t heavy[kHeavyKeys];
  for (int i = 0; i < kHeavyKeys; ++i) {
    const int r = rng() % 10;
    heavy[i] = r == 0            ? -1
               : r == 1          ? static_cast<int32_t>(rng() % (L + 5)) - 2
               : r == 2 && i > 0 ? heavy[i - 1]
                                 : static_cast<int32_t>(rng() % L);
  }
  // An entry right at F, F - 1 and F + 1 sometimes.
  const int32_t F = window_first(L, w);
  if (rng() % 4 == 0) heavy[rng() % kHeavyKeys] = F + static_cast<int32_t>(rng() % 3) - 1;
  ZSample ref;
  plan_window_sample(L, F, ref, heavy);
  // Kernel: s_heavy = heavy > F ? heavy - F : -1; plan_sample_shape(L - F); keys + F.
  int32_t s_heavy[kHeavyKeys];
  for (int tid = 0; tid < kHeavyKeys; ++tid) s_heavy[tid] = heavy[tid] > F ? heavy[tid] - F : -1;
  ZSampleShape sh;
  plan_sample_shape(L - F, s_heavy, sh);
  const bool strata = sh.m > kZStrata;
  std::vector<int32_t> s_key(kZSlots, -7);
  std::vector<int> writes(kZSlots, 0);
  auto put = [&](int slot, int32_t key) {
    if (slot < 0 || slot >= kZSlots) {
      std::fprintf(stderr, "FAIL slot %d out of range L=%d w=%d\n", slot, L, w);
      std::exit(1);
    }
    s_key[slot] = key;
    writes[slot] += 1;
  };
  for (int tid = 0; tid < 256; ++tid) {
    if (tid == 0) put(0, F);
    if (tid < sh.n_newest) put(1 + tid, F + sh.newest_lo + tid);
    if (tid < sh.n_heavy) put(1 + sh.n_newest + tid, F + sh.heavy_mid[tid]);
    if (strata) {
      if (tid < kZStrata) put(sh.first_middle + tid, F + sample_stratum_key(sh, s_heavy, tid));
    } else if (tid < sh.m) {
      const int slot = sample_exact_middle_slot(sh, s_heavy, 1 + tid);
      if (slot >= 0) put(slot, F + 1 + tid);
    }
  }
  const int n = sh.n;
  if (n != ref.n) {
    std::fprintf(stderr, "FAIL n %d != %d L=%d w=%d\n", n, ref.n, L, w);
    std::exit(1);
  }
  for (int i = 0; i < n; ++i) {
    if (writes[i] != 1 || s_key[i] != ref.key[i] || s_key[i] < F || s_key[i] >= L) {
      std::fprintf(stderr, "FAIL slot %d key %d ref %d writes %d L=%d w=%d\n", i, s_key[i],
                   ref.key[i], writes[i], L, w);
      std::exit(1);
    }
  }
  const int first_stratum = strata ? sh.first_middle : n;
  if (first_stratum != ref.first_stratum) {
    std::fprintf(stderr, "FAIL first_stratum L=%d w=%d\n", L, w);
    std::exit(1);
  }
  // Without a window (F = 0) the plain sample.
  if (F == 0) {
    ZSample plain;
    plan_reference_sample(L, plain, heavy);
    if (plain.n != n) std::exit(2);
    for (int i = 0; i < n; ++i)
      if (plain.key[i] != s_key[i]) std::exit(3);
  }
}

}  // namespace

int main(int argc, char **argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 20000;
  std::mt19937 rng(41);
  long configs = 0;
  const int Ls[] = {1, 2, 63, 64, 65, 100, 511, 512, 513, 1023, 1024, 1025, 1500, 4096, 5000};
  const int ws[] = {1,   2,   63,  64,  65,  100,  127,  128, 129,
                    255, 256, 511, 512, 513, 1000, 1024, 1025};
  const int Ps[] = {64, 128, 192, 256, 512, 1024};
  // Edges: every (L, w, P) of the lists above and L +- the window's edges.
  for (int L : Ls)
    for (int w : ws)
      for (int P : Ps)
        for (int dl = -1; dl <= 1; ++dl) {
          const int L2 = L + dl;
          if (L2 < 1) continue;
          check_splits(L2, w, P, rng);
          check_front(L2, w, rng);
          ++configs;
        }
  for (int it = 0; it < iters; ++it) {
    const int32_t L = 1 + static_cast<int32_t>(rng() % (rng() % 4 == 0 ? 20000 : 3000));
    const int32_t w = rng() % 8 == 0 ? 0 : 1 + static_cast<int32_t>(rng() % (L + 600));
    const int P = 64 * (1 + static_cast<int>(rng() % 8));
    check_splits(L, w, P, rng);
    check_front(L, w, rng);
    ++configs;
  }
  std::printf("decode window simulation: %ld configurations, all match\n", configs);
  return 0;
}
