// The decode CPU reference (the executable spec of the decode kernels). The C entry points
// (src/capi/decode_cpu.cpp) validate the descriptors and call these.
#pragma once

#include <cstdint>
#include <vector>

#include "fold_attention/decode.h"

namespace fold::cpu {

// Rows of new tokens: element (i, h, d) of k is k[i * k_token + h * k_head + d].
struct TokenRows {
  const void *k = nullptr;
  int64_t k_token = 0, k_head = 0;
  const void *v = nullptr;
  int64_t v_token = 0, v_head = 0;
};

// What an append will write, computed (and checked) before anything is written.
struct AppendPlan {
  int32_t request = 0, first = 0, n = 0;
  std::vector<float> k_rot;    // [n][Hkv][D] rotated keys
  std::vector<float> v;        // [n][Hkv][D] values as floats
  std::vector<int32_t> v_exp;  // v8: [Hkv] exponent after the append
};

// Checks an append of n tokens to request b (active, room, pages, finite data, v8 range);
// throws fold::Error naming `what` on failure. Writes nothing.
AppendPlan plan_append(const fold_kvcache_t &c, int32_t b, int32_t n, const TokenRows &rows,
                       const char *what);
// Writes a planned append (re-scaling a v8 request first if its exponent grows).
void commit_append(const fold_kvcache_t &c, const AppendPlan &plan);

// Test hooks; the defaults are the spec.
struct DecodeHooks {
  float z_offset = 0.0f;   // added to every row's sampled Z (forces the guard)
  int32_t split_keys = 0;  // 0: FOLD_DECODE_SPLIT_KEYS
  bool guard = true;       // false: return the unguarded result
  // If set, receives per (request, KV head) the group's per-key verdicts of the final pass
  // (bit 0 live, bit 1 refine, bit 2 V refine), indexed [b][hk][key].
  std::vector<std::vector<uint8_t>> *verdicts = nullptr;
  std::vector<float> *z = nullptr;  // if set, receives the final Z of each row [b][h]
};

// Fails (naming q) if a query row is not finite after scaling and rotation.
void check_queries(const fold_kvcache_t &c, const fold_decode_params_t &p, fold_tensor_t q);

// Attends q over every active request (appends must already be committed).
void decode_attend(const fold_kvcache_t &c, const fold_decode_params_t &p, fold_tensor_t q,
                   fold_tensor_t out, float *lse, fold_decode_stats_t *stats,
                   const DecodeHooks *hooks = nullptr);

// Structural checks of a cache descriptor and decode parameters (no data read except
// lengths).
void check_cache(const fold_kvcache_t *c);
// check_cache without reading lengths (a device-resident cache).
void check_cache_layout(const fold_kvcache_t *c);
void check_params(const fold_kvcache_t &c, const fold_decode_params_t *p);
// The sinks' values (host memory): each finite or -inf.
void check_sink_values(const fold_decode_params_t &p);
// A step's query head count against the cache: a positive multiple of n_kv_heads, groups <= 64.
void check_n_heads(const fold_kvcache_t &c, int32_t n_heads, const char *name);
// A (rows, heads, dim) view of 16-bit values (q, out, k_step, v_step: rows = the batch, by
// batch_stride; appended tokens: rows = the tokens, by token_stride): non-NULL, 2-byte aligned,
// rows that do not overlap, and every element's byte address inside the address space.
void check_rows(const char *name, const fold_tensor_t &t, int heads, int dim, int64_t rows,
                bool use_token);
// The step's parameters as the kernels (CPU and CUDA alike) run them: `dense` set where a depth's
// screen does not pay (decode_plan.h screen_pays; FOLD_DECODE_SCREEN=1 keeps every depth).
fold_decode_params_t planned_params(const fold_kvcache_t &c, const fold_decode_params_t &p);

}  // namespace fold::cpu
