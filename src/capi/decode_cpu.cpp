// C entry points of the decode CPU reference: validate the descriptors, then run it. Every
// check that can fail runs before the cache is modified.
#include "decode/decode_cpu.h"

#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/status.h"
#include "decode/decode_plan.h"
#include "decode/pinned_window.h"
#include "decode/v8_planes.h"
#include "fold_attention/decode.h"

// The Python binding (_decode_lib.FoldKVCacheDesc) mirrors this layout with ctypes; its test
// checks the same offsets from the other side.
static_assert(sizeof(fold_kvcache_t) == 136, "fold_kvcache_t layout changed");
static_assert(offsetof(fold_kvcache_t, lengths) == 120, "layout changed");
static_assert(offsetof(fold_kvcache_t, pinned_window) == 128, "layout changed");

namespace fold::cpu {

void check_cache_layout(const fold_kvcache_t *c) {
  if (c == nullptr) fail("cache is NULL");
  if (c->batch < 1) fail("cache->batch must be >= 1");
  if (c->n_kv_heads < 1) fail("cache->n_kv_heads must be >= 1");
  if (c->head_dim != 64 && c->head_dim != 128 && c->head_dim != 256)
    fail("cache->head_dim must be 64, 128 or 256, got " + std::to_string(c->head_dim));
  if (c->page_size < 64 || c->page_size % 64 != 0)
    fail("cache->page_size must be a positive multiple of 64, got " + std::to_string(c->page_size));
  if (c->max_len < 1) fail("cache->max_len must be >= 1");
  const int64_t ppr = (static_cast<int64_t>(c->max_len) + c->page_size - 1) / c->page_size;
  if (c->pages_per_request != ppr)
    fail("cache->pages_per_request must be ceil(max_len / page_size) = " + std::to_string(ppr));
  if (c->num_pages < 1) fail("cache->num_pages must be >= 1");
  if (c->dtype != FOLD_DTYPE_BF16 && c->dtype != FOLD_DTYPE_F16)
    fail("cache->dtype must be FOLD_DTYPE_BF16 or FOLD_DTYPE_F16");
  if (c->v8 != 0 && c->v8 != 1) fail("cache->v8 must be 0 or 1");
  if (c->pinned_window < 0) fail("cache->pinned_window must be >= 0 (0: none)");
  if (!c->k_a || !c->k_b || !c->k_scale)
    fail("cache K planes (k_a, k_b, k_scale) must be non-NULL");
  if (c->v8 ? (!c->v_a || !c->v_b || !c->v_exp) : !c->v)
    fail(c->v8 ? "cache->v_a, v_b and v_exp must be non-NULL when v8" : "cache->v is NULL");
  if (!c->v_page_sum || !c->heavy_keys || !c->page_table || !c->lengths)
    fail("cache->v_page_sum, heavy_keys, page_table and lengths must be non-NULL");
}

void check_cache(const fold_kvcache_t *c) {
  check_cache_layout(c);
  for (int b = 0; b < c->batch; ++b)
    if (c->lengths[b] < -1 || c->lengths[b] > c->max_len)
      fail("cache->lengths[" + std::to_string(b) + "] = " + std::to_string(c->lengths[b]) +
           " is outside [-1, max_len]");
  if (c->v_exp_fixed != 0 && c->v_exp_fixed != 1) fail("cache->v_exp_fixed must be 0 or 1");
  if (c->v8) {
    // The V exponents the writers choose (or the caller fixes): anything else would scale V by
    // an arbitrary power of two (or overflow exp2i's integer arithmetic).
    const int64_t n = static_cast<int64_t>(c->batch) * c->n_kv_heads;
    for (int64_t i = 0; i < n; ++i) {
      const int32_t e = c->v_exp[i];
      if (e != FOLD_DECODE_V_EXP_UNSET && (e < decode::kVExpMin || e > decode::kVExpMax))
        fail("cache->v_exp[" + std::to_string(i) + "] = " + std::to_string(e) + " is outside [" +
             std::to_string(decode::kVExpMin) + ", " + std::to_string(decode::kVExpMax) +
             "] (and not FOLD_DECODE_V_EXP_UNSET)");
    }
  }
}

void check_rows(const char *name, const fold_tensor_t &t, int heads, int dim, int64_t rows,
                bool use_token) {
  const std::string n(name);
  if (t.data == nullptr) fail(n + " is NULL");
  if (reinterpret_cast<uintptr_t>(t.data) % 2 != 0) fail(n + ": data must be 2-byte aligned");
  const int64_t inner = use_token ? t.token_stride : t.batch_stride;
  if (heads > 1 && t.head_stride < dim) fail(n + ": head_stride must be >= head_dim");
  int64_t span = 0, last = 0, bytes = 0;
  const auto too_far = [&] { fail(n + ": the view's extent overflows the address space"); };
  if (__builtin_mul_overflow(static_cast<int64_t>(heads - 1), t.head_stride, &span) ||
      __builtin_add_overflow(span, static_cast<int64_t>(dim), &span))
    too_far();
  if (inner < span)
    fail(n + std::string(use_token ? ": token_stride" : ": batch_stride") +
         " is too small for its heads (rows would overlap)");
  // The last row's end, in elements then bytes, and the end address.
  if (rows > 0 && (__builtin_mul_overflow(rows - 1, inner, &last) ||
                   __builtin_add_overflow(last, span, &last) ||
                   __builtin_mul_overflow(last, int64_t{2}, &bytes) ||
                   reinterpret_cast<uintptr_t>(t.data) + static_cast<uintptr_t>(bytes) <
                       reinterpret_cast<uintptr_t>(t.data)))
    too_far();
}

void check_n_heads(const fold_kvcache_t &c, int32_t n_heads, const char *name) {
  if (n_heads < 1 || n_heads % c.n_kv_heads != 0)
    fail(std::string(name) + " must be a positive multiple of n_kv_heads");
  if (n_heads / c.n_kv_heads > 64) fail("the GQA group size n_heads / n_kv_heads must be <= 64");
}

void check_params(const fold_kvcache_t &c, const fold_decode_params_t *p) {
  if (p == nullptr) fail("params is NULL");
  check_n_heads(c, p->n_heads, "params->n_heads");
  if (!(std::isfinite(p->softmax_scale) && p->softmax_scale > 0))
    fail("params->softmax_scale must be finite and > 0");
  if (p->dense != 0 && p->dense != 1) fail("params->dense must be 0 or 1");
  if (!p->dense && !(std::isfinite(p->depth) && p->depth > 0))
    fail("params->depth must be finite and > 0");
  if (!(std::isfinite(p->refine_band) && p->refine_band >= 0))
    fail("params->refine_band must be finite and >= 0");
  if (!(std::isfinite(p->v_refine_band) && p->v_refine_band >= 0))
    fail("params->v_refine_band must be finite and >= 0");
  if (p->window_before < 0) fail("params->window_before must be >= 0 (0: no window)");
  // A narrower window reads only keys the pinned one keeps (L - w >= L - pinned >= kept(L)):
  // a chunk's tokens after a request's history take windows narrower by their offsets.
  if (c.pinned_window > 0 && (p->window_before < 1 || p->window_before > c.pinned_window))
    fail("params->window_before (" + std::to_string(p->window_before) +
         ") must be in [1, cache->pinned_window = " + std::to_string(c.pinned_window) +
         "]: the cache keeps no keys before that window");
  if (p->sinks != nullptr && reinterpret_cast<uintptr_t>(p->sinks) % 4 != 0)
    fail("params->sinks must be 4-byte aligned");
}

void check_sink_values(const fold_decode_params_t &p) {
  if (p.sinks == nullptr) return;
  for (int h = 0; h < p.n_heads; ++h)
    if (std::isnan(p.sinks[h]) || p.sinks[h] == std::numeric_limits<float>::infinity())
      fail("params->sinks[" + std::to_string(h) + "] must be finite or -inf, got " +
           std::to_string(p.sinks[h]));
}

fold_decode_params_t planned_params(const fold_kvcache_t &c, const fold_decode_params_t &p) {
  fold_decode_params_t out = p;
  if (p.dense) return out;
  const char *keep = std::getenv("FOLD_DECODE_SCREEN");
  if (keep != nullptr && std::strcmp(keep, "1") == 0) return out;
  if (!fold::decode::screen_pays(p.n_heads / c.n_kv_heads, c.head_dim, c.v8 != 0)) out.dense = 1;
  return out;
}

}  // namespace fold::cpu

namespace {

using fold::cpu::check_rows;

// The pages of the keys a call may read: [kept(L), L) of each active request (every key unless
// the cache is pinned to a window, whose earlier pages may be released).
void check_pages_readable(const fold_kvcache_t &c) {
  for (int b = 0; b < c.batch; ++b) {
    const int32_t L = c.lengths[b];
    const int64_t pages = (static_cast<int64_t>(L) + c.page_size - 1) / c.page_size;
    const int64_t first = fold::decode::pinned_kept(L, c.pinned_window, c.page_size) / c.page_size;
    for (int64_t i = first; i < pages; ++i) {
      const int32_t page = c.page_table[b * static_cast<int64_t>(c.pages_per_request) + i];
      if (page < 0 || page >= c.num_pages)
        fold::fail("page_table[" + std::to_string(b) + "][" + std::to_string(i) +
                   "] = " + std::to_string(page) + " is not a page of the pool");
    }
  }
}

}  // namespace

extern "C" {

fold_status_t fold_kvcache_append_cpu(const fold_kvcache_t *cache, int32_t request,
                                      int32_t n_tokens, fold_tensor_t k, fold_tensor_t v) {
  return fold::guarded("fold_kvcache_append_cpu", [&] {
    fold::cpu::check_cache(cache);
    if (request < 0 || request >= cache->batch)
      fold::fail("request " + std::to_string(request) + " is out of range [0, " +
                 std::to_string(cache->batch) + ")");
    if (cache->lengths[request] < 0)
      fold::fail("request " + std::to_string(request) + " is not active (released or never added)");
    if (n_tokens < 0) fold::fail("n_tokens must be >= 0");
    if (n_tokens == 0) return;
    check_rows("k", k, cache->n_kv_heads, cache->head_dim, n_tokens, true);
    check_rows("v", v, cache->n_kv_heads, cache->head_dim, n_tokens, true);
    // The pages of the keys already there too: the heavy-key list and a v8 re-scale read them.
    check_pages_readable(*cache);
    fold::cpu::TokenRows rows{k.data, k.token_stride, k.head_stride,
                              v.data, v.token_stride, v.head_stride};
    const fold::cpu::AppendPlan plan = fold::cpu::plan_append(*cache, request, n_tokens, rows, "");
    fold::cpu::commit_append(*cache, plan);
  });
}

fold_status_t fold_decode_cpu(const fold_kvcache_t *cache, const fold_decode_params_t *params,
                              fold_tensor_t q, fold_tensor_t k_step, fold_tensor_t v_step,
                              fold_tensor_t out, float *lse, fold_decode_stats_t *stats) {
  return fold::guarded("fold_decode_cpu", [&] {
    fold::cpu::check_cache(cache);
    fold::cpu::check_params(*cache, params);
    const fold_kvcache_t &c = *cache;
    check_rows("q", q, params->n_heads, c.head_dim, c.batch, false);
    check_rows("out", out, params->n_heads, c.head_dim, c.batch, false);
    if (reinterpret_cast<uintptr_t>(lse) % 4 != 0) fold::fail("lse must be 4-byte aligned");
    std::vector<fold::cpu::AppendPlan> plans;
    if (k_step.data != nullptr) {
      check_rows("k_step", k_step, c.n_kv_heads, c.head_dim, c.batch, false);
      check_rows("v_step", v_step, c.n_kv_heads, c.head_dim, c.batch, false);
      fold::cpu::TokenRows rows{k_step.data, 0, k_step.head_stride,
                                v_step.data, 0, v_step.head_stride};
      for (int b = 0; b < c.batch; ++b) {
        if (c.lengths[b] < 0) continue;
        fold::cpu::TokenRows r = rows;
        r.k = static_cast<const char *>(k_step.data) + b * k_step.batch_stride * 2;
        r.v = static_cast<const char *>(v_step.data) + b * v_step.batch_stride * 2;
        plans.push_back(fold::cpu::plan_append(c, b, 1, r, "_step"));
      }
    } else if (v_step.data != nullptr) {
      fold::fail("v_step is given without k_step");
    }
    fold::cpu::check_sink_values(*params);
    fold::cpu::check_queries(c, *params, q);
    check_pages_readable(c);  // the keys already there; plan_append checked the new ones
    for (const auto &plan : plans) fold::cpu::commit_append(c, plan);
    fold::cpu::decode_attend(c, fold::cpu::planned_params(c, *params), q, out, lse, stats);
  });
}

}  // extern "C"
