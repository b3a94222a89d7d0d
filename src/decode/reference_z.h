// The declared reference Z of a decode row: an estimate of its base-2 LSE from a fixed
// sample of keys, scored with fine (two-plane) logits. Any Z keeps the weights 2^(s - Z)
// exact-in-meaning; the estimate only has to be close enough that the row's total
// T = sum 2^(s - Z) lands inside the guard window (else the row is recomputed with its
// exact LSE, see decode_plan.h).
//
// Sample of a request of L keys (slot order is part of the spec, it fixes the sum's order):
//   slot 0            key 0 (attention sinks live there)
//   next              the newest min(63, L - 1) keys, ascending (the appended key included)
//   next              the request's heavy keys (up to kHeavyKeys: the keys with the largest
//                     K scales so far, kept by the cache writer) that lie in the middle,
//                     in list order: high-norm keys are where a needle the strata miss
//                     usually is
//   middle keys [1, L - 63): m = L - 64 of them when L > 64 (heavy keys skipped below)
//     m <= 128:       every middle key, ascending, counted once (Z is then the exact LSE)
//     m  > 128:       128 stratum samples, key 1 + floor((2i + 1) m / 256), i = 0..127,
//                     moved to the next key while it is a heavy key (and still middle).
// Weights: exact slots 1. Stratum samples stand for m / 128 keys each, except the
// kZTopUnweighted largest (by value, then lower slot), which count once: a sample that hits a
// heavy key must not be multiplied by the stride or Z overshoots. The other 124 carry
// (m - 4) / 124 each (their strata also cover the top samples' neighbours). The rank of a
// stratum sample is taken among the unweighted values 2^(s - M) of all stratum samples (so
// every rank is independent: a warp computes them in parallel).
// Heavy-list entries outside [1, newest_lo) (negative, or >= L: only a hand-made cache has
// those) never enter the sample.
// Sum: with M = the largest sample logit, slot values w * 2^(s - M) padded with zeros to 256
// slots, summed by the halving tree (x[i] += x[i + h] for h = 128, 64, ..., 1), which a warp
// of shuffles reproduces exactly. Z = M + log2(sum) (sum >= 1: the max slot weighs 1).
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "decode/fp_rules.h"

namespace fold::decode {

constexpr int kZNewest = 63;
constexpr int kZStrata = 128;
constexpr int kZTopUnweighted = 4;
constexpr int kZSlots = 256;
constexpr int kHeavyKeys = 8;  // FOLD_DECODE_HEAVY_KEYS

struct ZSample {
  int n = 0;                 // slots used
  int first_stratum = 0;     // slots [first_stratum, n) are stratum samples (none if == n)
  float stratum_weight = 1;  // weight of a non-top stratum sample
  int32_t key[kZSlots];      // key index of each slot
};

FOLD_HD bool is_heavy(const int32_t *heavy, int32_t j) {
  for (int i = 0; i < kHeavyKeys; ++i)
    if (heavy != nullptr && heavy[i] == j) return true;
  return false;
}

// The first of a request's newest keys (the sample's newest slots: keys [newest_lo, L)).
FOLD_HD int32_t sample_newest_lo(int32_t L) { return L - kZNewest > 1 ? L - kZNewest : 1; }

// heavy: the request's kHeavyKeys list (-1 = empty entry) or nullptr.
FOLD_HD void plan_reference_sample(int32_t L, ZSample &z, const int32_t *heavy = nullptr) {
  z.n = 0;
  z.stratum_weight = 1.0f;
  if (L <= 0) {
    z.first_stratum = 0;
    return;
  }
  z.key[z.n++] = 0;
  const int32_t newest_lo = sample_newest_lo(L);
  for (int32_t j = newest_lo; j < L; ++j) z.key[z.n++] = j;
  if (heavy != nullptr)
    for (int i = 0; i < kHeavyKeys; ++i)
      if (heavy[i] >= 1 && heavy[i] < newest_lo) z.key[z.n++] = heavy[i];
  const int32_t m = newest_lo - 1;  // middle keys [1, newest_lo)
  if (m <= kZStrata) {
    for (int32_t j = 1; j < newest_lo; ++j)
      if (!is_heavy(heavy, j)) z.key[z.n++] = j;
    z.first_stratum = z.n;
    return;
  }
  z.first_stratum = z.n;
  for (int i = 0; i < kZStrata; ++i) {
    int32_t j = 1 + static_cast<int32_t>((static_cast<int64_t>(2 * i + 1) * m) / (2 * kZStrata));
    while (is_heavy(heavy, j) && j + 1 < newest_lo) ++j;
    z.key[z.n++] = j;
  }
  z.stratum_weight = div_rn(static_cast<float>(m - kZTopUnweighted),
                            static_cast<float>(kZStrata - kZTopUnweighted));
}

// The sample of a sliding window's keys [first, L) (0 <= first < L): the sample of a request
// of L - first keys with every key and heavy entry shifted by first (slot 0 is the window's
// first key), so that first = 0 is the plain sample. Heavy entries at or before first drop out.
FOLD_HD void plan_window_sample(int32_t L, int32_t first, ZSample &z,
                                const int32_t *heavy = nullptr) {
  int32_t shifted[kHeavyKeys];
  for (int i = 0; i < kHeavyKeys; ++i)
    shifted[i] = heavy != nullptr && heavy[i] > first ? heavy[i] - first : -1;
  plan_reference_sample(L - first, z, heavy != nullptr ? shifted : nullptr);
  for (int i = 0; i < z.n; ++i) z.key[i] += first;
}

// The shape of the sample (everything but the middle keys' slots), so that a kernel can
// place every slot in parallel: slot 0 key 0, slots [1, 1 + n_newest) the newest keys,
// then the heavy middle keys (list order), then from first_middle either every non-heavy
// middle key ascending (m <= kZStrata) or the kZStrata stratum samples. It depends on the
// heavy list only through two masks over its entries (bit e: entry e): `valid`, the middle
// entries (1 <= heavy[e] < newest_lo), and `distinct`, those whose key no earlier valid entry
// holds. The CUDA front computes the masks with warp votes (decode_front.cuh), heavy_masks
// here with loops; everything else is these functions on both sides.
struct ZSampleShape {
  int32_t newest_lo = 1, m = 0;
  int n_newest = 0, n_heavy = 0, first_middle = 0, n = 0;
  unsigned valid = 0u, distinct = 0u;
};

FOLD_HD int popcount32(unsigned x) {
#if defined(__CUDA_ARCH__)
  return __popc(x);
#else
  return __builtin_popcount(x);
#endif
}

// Whether a heavy-list entry is a middle key of a request whose newest keys start at newest_lo.
FOLD_HD bool heavy_is_middle(int32_t h, int32_t newest_lo) { return h >= 1 && h < newest_lo; }

FOLD_HD void heavy_masks(const int32_t *heavy, int32_t newest_lo, unsigned &valid,
                         unsigned &distinct) {
  valid = 0u;
  distinct = 0u;
  if (heavy == nullptr) return;
  for (int e = 0; e < kHeavyKeys; ++e) {
    if (!heavy_is_middle(heavy[e], newest_lo)) continue;
    bool seen = false;
    for (int f = 0; f < e; ++f) seen = seen || (((valid >> f) & 1u) != 0u && heavy[f] == heavy[e]);
    valid |= 1u << e;
    distinct |= seen ? 0u : 1u << e;
  }
}

FOLD_HD ZSampleShape sample_shape(int32_t L, unsigned valid, unsigned distinct) {
  ZSampleShape s;
  s.newest_lo = sample_newest_lo(L);
  s.n_newest = L - s.newest_lo;
  s.m = s.newest_lo - 1;
  s.valid = valid;
  s.distinct = distinct;
  s.n_heavy = popcount32(valid);
  s.first_middle = 1 + s.n_newest + s.n_heavy;
  // (m <= kZStrata: the distinct heavy middle keys are skipped among the middle ones.)
  s.n = s.m <= kZStrata ? s.first_middle + s.m - popcount32(distinct) : s.first_middle + kZStrata;
  return s;
}

// The slot of heavy entry e (a valid one): the heavy middle keys in list order.
FOLD_HD int sample_heavy_slot(const ZSampleShape &s, int e) {
  return 1 + s.n_newest + popcount32(s.valid & ((1u << e) - 1u));
}

// m <= kZStrata: the slot of middle key j in [1, newest_lo), or -1 if j is heavy.
FOLD_HD int sample_exact_middle_slot(const ZSampleShape &s, const int32_t *heavy, int32_t j) {
  if (is_heavy(heavy, j)) return -1;
  int below = 0;  // distinct heavy middle keys < j
  for (int e = 0; e < kHeavyKeys; ++e) below += ((s.distinct >> e) & 1u) != 0u && heavy[e] < j;
  return s.first_middle + (j - 1) - below;
}

// m > kZStrata: the key of stratum sample i.
FOLD_HD int32_t sample_stratum_key(const ZSampleShape &s, const int32_t *heavy, int i) {
  int32_t j = 1 + static_cast<int32_t>((static_cast<int64_t>(2 * i + 1) * s.m) / (2 * kZStrata));
  while (is_heavy(heavy, j) && j + 1 < s.newest_lo) ++j;
  return j;
}

// The rank of stratum slot i among slots [first, n) of x: values above it, or equal at a
// lower slot.
FOLD_HD int stratum_rank(const float *x, int first, int n, int i) {
  int above = 0;
  for (int j = first; j < n; ++j) above += (x[j] > x[i] || (x[j] == x[i] && j < i)) ? 1 : 0;
  return above;
}

// Z from the fine logits s[slot] of the plan's keys (n >= 1).
FOLD_HD float reference_z(const ZSample &z, const float *s) {
  float m = s[0];
  for (int i = 1; i < z.n; ++i) m = s[i] > m ? s[i] : m;
  float x[kZSlots];
  for (int i = 0; i < kZSlots; ++i) x[i] = i < z.n ? exp2_fp(sub_rn(s[i], m)) : 0.0f;
  if (z.first_stratum < z.n) {
    // Top kZTopUnweighted samples keep weight 1; rank by value, ties to the lower slot,
    // among the unweighted values (every rank is decided before any weight is applied).
    bool weighted[kZSlots];
    for (int i = z.first_stratum; i < z.n; ++i)
      weighted[i] = stratum_rank(x, z.first_stratum, z.n, i) >= kZTopUnweighted;
    for (int i = z.first_stratum; i < z.n; ++i)
      if (weighted[i]) x[i] = mul_rn(x[i], z.stratum_weight);
  }
  for (int h = kZSlots / 2; h >= 1; h /= 2)
    for (int i = 0; i < h; ++i) x[i] = add_rn(x[i], x[i + h]);
  return add_rn(m, log2_fp(x[0]));
}

}  // namespace fold::decode
