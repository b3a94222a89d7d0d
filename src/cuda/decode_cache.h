// The decode kernels' view of a cache: fold_kvcache_t's fields up to `lengths`, in its order.
// pinned_window (decode.h) is left out: only the writers read it, through AppendArgs, and a
// parameter struct of the old size keeps every other kernel's parameter layout, hence its
// machine code, as it was.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fold_attention/decode.h"

namespace fold::cuda {

struct DecodeCache {
  int32_t batch;
  int32_t n_kv_heads;
  int32_t head_dim;
  int32_t page_size;
  int32_t max_len;
  int32_t pages_per_request;
  int32_t num_pages;
  int32_t dtype;
  int32_t v8;
  int32_t v_exp_fixed;
  int8_t *k_a;
  int8_t *k_b;
  uint16_t *k_scale;
  void *v;
  uint8_t *v_a;
  uint8_t *v_b;
  int32_t *v_exp;
  float *v_page_sum;
  int32_t *heavy_keys;
  int32_t *page_table;
  int32_t *lengths;
};

static_assert(offsetof(DecodeCache, lengths) == offsetof(fold_kvcache_t, lengths) &&
                  sizeof(DecodeCache) == offsetof(fold_kvcache_t, pinned_window),
              "DecodeCache is fold_kvcache_t's leading fields");

inline DecodeCache device_view(const fold_kvcache_t &c) {
  return DecodeCache{
      c.batch,      c.n_kv_heads, c.head_dim, c.page_size,   c.max_len, c.pages_per_request,
      c.num_pages,  c.dtype,      c.v8,       c.v_exp_fixed, c.k_a,     c.k_b,
      c.k_scale,    c.v,          c.v_a,      c.v_b,         c.v_exp,   c.v_page_sum,
      c.heavy_keys, c.page_table, c.lengths};
}

}  // namespace fold::cuda
