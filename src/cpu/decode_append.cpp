// Writing tokens into the decode cache: K rotated and split into two int8 planes with one
// scale per key, V stored as given (bf16/fp16) or as two E4M3 planes under the request's
// power-of-two scale, and the running V sum. Every check happens in plan_append, before
// any byte of the cache changes, so a failed call leaves the cache as it was.
#include <cmath>
#include <string>

#include "core/half_types.h"
#include "core/status.h"
#include "cpu/rows.h"
#include "decode/decode_cpu.h"
#include "decode/pinned_window.h"
#include "decode/planes.h"
#include "decode/reference_z.h"
#include "decode/v8_planes.h"

namespace fold::cpu {

namespace {

int64_t key_row(const fold_kvcache_t &c, int32_t page, int hk, int32_t r) {
  return (static_cast<int64_t>(page) * c.n_kv_heads + hk) * c.page_size + r;
}

int32_t page_of(const fold_kvcache_t &c, int32_t b, int32_t t) {
  return c.page_table[static_cast<int64_t>(b) * c.pages_per_request + t / c.page_size];
}

template <class T>
float load(const void *base, int64_t i) {
  return to_float(static_cast<const T *>(base)[i]);
}

float load_any(int dtype, const void *base, int64_t i) {
  return dtype == FOLD_DTYPE_BF16 ? load<bf16_t>(base, i) : load<f16_t>(base, i);
}

}  // namespace

AppendPlan plan_append(const fold_kvcache_t &c, int32_t b, int32_t n, const TokenRows &rows,
                       const char *what) {
  const int Hk = c.n_kv_heads, D = c.head_dim;
  if (b < 0 || b >= c.batch)
    fail("request " + std::to_string(b) + " is out of range [0, " + std::to_string(c.batch) + ")");
  const int32_t L = c.lengths[b];
  if (L < 0) fail("request " + std::to_string(b) + " is not active (released or never added)");
  if (n < 0) fail("n_tokens must be >= 0");
  if (static_cast<int64_t>(L) + n > c.max_len)
    fail("request " + std::to_string(b) + " is full: " + std::to_string(L) + " + " +
         std::to_string(n) + " tokens exceed max_len " + std::to_string(c.max_len));
  for (int64_t t = L; t < static_cast<int64_t>(L) + n; t += 1) {
    const int32_t page = page_of(c, b, static_cast<int32_t>(t));
    if (page < 0 || page >= c.num_pages)
      fail("page_table[" + std::to_string(b) + "][" + std::to_string(t / c.page_size) +
           "] = " + std::to_string(page) + " is not a page of the pool");
  }
  AppendPlan plan;
  plan.request = b;
  plan.first = L;
  plan.n = n;
  const size_t count = static_cast<size_t>(n) * Hk * D;
  plan.k_rot.resize(count);
  plan.v.resize(count);
  for (int32_t i = 0; i < n; ++i)
    for (int h = 0; h < Hk; ++h) {
      float *kr = &plan.k_rot[(static_cast<size_t>(i) * Hk + h) * D];
      float *vr = &plan.v[(static_cast<size_t>(i) * Hk + h) * D];
      for (int d = 0; d < D; ++d) {
        kr[d] = load_any(c.dtype, rows.k, i * rows.k_token + h * rows.k_head + d);
        vr[d] = load_any(c.dtype, rows.v, i * rows.v_token + h * rows.v_head + d);
        if (!std::isfinite(kr[d])) fail(std::string("k") + what + " holds a non-finite value");
        if (!std::isfinite(vr[d])) fail(std::string("v") + what + " holds a non-finite value");
      }
      decode::hadamard_unnormalised(kr, D);
      for (int d = 0; d < D; ++d)
        if (!std::isfinite(kr[d]))
          fail(std::string("k") + what + " is too large: its Hadamard rotation overflows float32");
    }
  if (c.v8) {
    plan.v_exp.resize(Hk);
    for (int h = 0; h < Hk; ++h) {
      float amax = 0.0f;
      for (int32_t i = 0; i < n; ++i)
        for (int d = 0; d < D; ++d)
          amax = std::max(amax, std::fabs(plan.v[(static_cast<size_t>(i) * Hk + h) * D + d]));
      int32_t x = c.v_exp[static_cast<int64_t>(b) * Hk + h];
      if (x == decode::kVExpUnset) {
        if (c.v_exp_fixed) fail("v_exp of a fixed-scale cache is unset");
        if (amax > 0.0f) x = decode::v_exponent_for(amax);
      } else if (amax > 0.0f && !decode::v_fits(amax, x)) {
        if (c.v_exp_fixed)
          fail(std::string("v") + what + " holds |v| = " + std::to_string(amax) +
               " beyond the fixed v_scale 2^" + std::to_string(x) + " * 448 (E4M3 range)");
        x = decode::v_exponent_for(amax);
      }
      if (amax > 0.0f && !decode::v_fits(amax, x))
        fail(std::string("v") + what + " holds |v| = " + std::to_string(amax) +
             " beyond the v8 range");
      plan.v_exp[h] = x;
    }
  }
  return plan;
}

namespace {

// Re-quantises tokens [kept(L), L) of head hk of request b from exponent `from` to `to`
// (> from): each stored value e*(a + b/8) is decoded and split again under the new scale. (A
// pinned cache's keys before kept(L) are never read again; their pages may be released.)
void rescale_v8(const fold_kvcache_t &c, int32_t b, int hk, int32_t L, int from, int to) {
  const int D = c.head_dim;
  for (int32_t t = decode::pinned_kept(L, c.pinned_window, c.page_size); t < L; ++t) {
    const int64_t row = key_row(c, page_of(c, b, t), hk, t % c.page_size) * D;
    for (int d = 0; d < D; ++d) {
      const float v = decode::v8_value(c.v_a[row + d], c.v_b[row + d], from, true);
      decode::v8_split(v, to, c.v_a[row + d], c.v_b[row + d]);
    }
  }
}

// The request's heavy-key list: the kHeavyKeys keys with the largest scale bits (positive
// bf16 bits order like their values), ties to the older key, sorted that way. A new key
// enters if it beats the last entry (or an entry is empty). A pinned cache first forgets the
// entries before kept(t).
void update_heavy(const fold_kvcache_t &c, int32_t b, int h, int32_t t, uint16_t scale) {
  int32_t *list = c.heavy_keys + (static_cast<int64_t>(b) * c.n_kv_heads + h) * decode::kHeavyKeys;
  if (c.pinned_window > 0)
    decode::heavy_forget_before<decode::kHeavyKeys>(
        list, nullptr, decode::pinned_kept(t, c.pinned_window, c.page_size));
  auto scale_of = [&](int32_t j) {
    return c.k_scale[key_row(c, page_of(c, b, j), h, j % c.page_size)];
  };
  int pos = decode::kHeavyKeys;
  while (pos > 0 && (list[pos - 1] < 0 || scale_of(list[pos - 1]) < scale)) --pos;
  if (pos == decode::kHeavyKeys) return;
  for (int i = decode::kHeavyKeys - 1; i > pos; --i) list[i] = list[i - 1];
  list[pos] = t;
}

}  // namespace

void commit_append(const fold_kvcache_t &c, const AppendPlan &plan) {
  const int Hk = c.n_kv_heads, D = c.head_dim;
  const int32_t b = plan.request;
  if (c.v8)
    for (int h = 0; h < Hk; ++h) {
      int32_t &x = c.v_exp[static_cast<int64_t>(b) * Hk + h];
      if (x != decode::kVExpUnset && plan.v_exp[h] != x)
        rescale_v8(c, b, h, plan.first, x, plan.v_exp[h]);
      x = plan.v_exp[h];
    }
  // Heavy-list entries outside [0, first) (only a hand-made cache has them) count as empty:
  // their page would be a stale one (the CUDA writer does the same).
  for (int h = 0; h < Hk && plan.n > 0; ++h) {
    int32_t *list = c.heavy_keys + (static_cast<int64_t>(b) * Hk + h) * decode::kHeavyKeys;
    for (int e = 0; e < decode::kHeavyKeys; ++e)
      if (list[e] < 0 || list[e] >= plan.first) list[e] = -1;
  }
  for (int32_t i = 0; i < plan.n; ++i) {
    const int32_t t = plan.first + i;
    const int32_t page = page_of(c, b, t);
    for (int h = 0; h < Hk; ++h) {
      const size_t src = (static_cast<size_t>(i) * Hk + h) * D;
      const int64_t r = key_row(c, page, h, t % c.page_size);
      c.k_scale[r] = decode::quantise_row(&plan.k_rot[src], D, c.k_a + r * D, c.k_b + r * D);
      update_heavy(c, b, h, t, c.k_scale[r]);
      // The page's V sum, in token order; the page's first token starts it afresh (a
      // page reused from a released request needs no clearing).
      float *sum = c.v_page_sum + (static_cast<int64_t>(page) * Hk + h) * D;
      const bool first = t % c.page_size == 0;
      for (int d = 0; d < D; ++d) {
        const float v = plan.v[src + d];
        sum[d] = first ? v : decode::add_rn(sum[d], v);
        if (c.v8) {
          // An unset exponent here means every value so far is zero: any exponent stores it.
          const int x = plan.v_exp[h] == decode::kVExpUnset ? 0 : plan.v_exp[h];
          decode::v8_split(v, x, c.v_a[r * D + d], c.v_b[r * D + d]);
        } else if (c.dtype == FOLD_DTYPE_BF16) {
          static_cast<bf16_t *>(c.v)[r * D + d] = bf16_from_float(v);
        } else {
          static_cast<f16_t *>(c.v)[r * D + d] = f16_from_float(v);
        }
      }
    }
  }
  c.lengths[b] = plan.first + plan.n;
}

}  // namespace fold::cpu
