// C entry points of the CUDA decode: host-side checks of the descriptors (no device memory
// is read), then the launchers. See decode.h for what the caller must guarantee.
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/status.h"
#include "cuda/device_args.h"
#include "cuda/launch.h"
#include "decode/decode_cpu.h"
#include "fold_attention/decode.h"

namespace {

void require_cuda_build() {
  if (!fold_built_with_cuda())
    fold::fail(FOLD_ERR_NO_CUDA, "this library was built without CUDA (no nvcc at build time)");
}

// The kernels read rows with 16-bit loads of a contiguous last dimension.
using fold::cpu::check_rows;

void check_cuda_cache(const fold_kvcache_t *c) {
  fold::cpu::check_cache_layout(c);
  if (c->batch > 65535)
    fold::fail(FOLD_ERR_UNSUPPORTED, "cache->batch: the CUDA decode takes <= 65535 slots");
  if (c->n_kv_heads > 65535)
    fold::fail(FOLD_ERR_UNSUPPORTED, "cache->n_kv_heads: <= 65535 on CUDA");
  const uintptr_t planes[] = {reinterpret_cast<uintptr_t>(c->k_a),
                              reinterpret_cast<uintptr_t>(c->k_b)};
  for (uintptr_t p : planes)
    if (p % 16 != 0)
      fold::fail(FOLD_ERR_UNSUPPORTED, "cache K planes must be 16-byte aligned on CUDA");
  // The split kernel copies the key scales (8 per copy) and value rows with 16-byte cp.async.
  if (reinterpret_cast<uintptr_t>(c->k_scale) % 16 != 0)
    fold::fail(FOLD_ERR_UNSUPPORTED, "cache K scales must be 16-byte aligned on CUDA");
  const uintptr_t values[] = {reinterpret_cast<uintptr_t>(c->v),
                              reinterpret_cast<uintptr_t>(c->v_a),
                              reinterpret_cast<uintptr_t>(c->v_b)};
  for (uintptr_t p : values)
    if (p % 16 != 0)
      fold::fail(FOLD_ERR_UNSUPPORTED, "cache value arrays must be 16-byte aligned on CUDA");
}

// The cache's arrays and the call's own device arguments (device_args.h), in one pass: the
// stream and device queries once per call.
void check_cache_device(const fold_kvcache_t &c, std::initializer_list<fold::cuda::DeviceArg> call,
                        void *stream) {
  constexpr size_t kCache = 11, kCallMax = 8;
  fold::cuda::DeviceArg args[kCache + kCallMax] = {{"cache->k_a", c.k_a},
                                                   {"cache->k_b", c.k_b},
                                                   {"cache->k_scale", c.k_scale},
                                                   {"cache->v", c.v},
                                                   {"cache->v_a", c.v_a},
                                                   {"cache->v_b", c.v_b},
                                                   {"cache->v_exp", c.v_exp},
                                                   {"cache->v_page_sum", c.v_page_sum},
                                                   {"cache->heavy_keys", c.heavy_keys},
                                                   {"cache->page_table", c.page_table},
                                                   {"cache->lengths", c.lengths}};
  if (call.size() > kCallMax) fold::fail("internal: too many device arguments to check");
  size_t n = kCache;
  for (const fold::cuda::DeviceArg &a : call) args[n++] = a;
  fold::cuda::check_device_args(args, n, stream);
}

}  // namespace

extern "C" {

size_t fold_decode_cuda_workspace_size(const fold_kvcache_t *cache, int32_t n_heads) {
  // 0 (with fold_last_error set) for a cache or head count fold_decode_cuda would reject.
  size_t bytes = 0;
  const fold_status_t status = fold::guarded("fold_decode_cuda_workspace_size", [&] {
    check_cuda_cache(cache);
    fold::cpu::check_n_heads(*cache, n_heads, "n_heads");
    bytes = fold::cuda::decode_workspace(*cache, n_heads, nullptr).total_bytes;
    if (bytes == 0) fold::fail("the workspace's size overflows size_t");
  });
  return status == FOLD_OK ? bytes : 0;
}

fold_status_t fold_kvcache_append_cuda(const fold_kvcache_t *cache, int32_t request,
                                       int32_t n_tokens, fold_tensor_t k, fold_tensor_t v,
                                       void *stream) {
  return fold::guarded("fold_kvcache_append_cuda", [&] {
    require_cuda_build();
    check_cuda_cache(cache);
    if (request < 0 || request >= cache->batch)
      fold::fail("request " + std::to_string(request) + " is out of range [0, " +
                 std::to_string(cache->batch) + ")");
    if (n_tokens < 0) fold::fail("n_tokens must be >= 0");
    if (n_tokens > cache->max_len) fold::fail("n_tokens exceeds max_len");
    if (n_tokens == 0) return;
    check_rows("k", k, cache->n_kv_heads, cache->head_dim, n_tokens, true);
    check_rows("v", v, cache->n_kv_heads, cache->head_dim, n_tokens, true);
    check_cache_device(*cache, {{"k", k.data}, {"v", v.data}}, stream);
    fold::cuda::launch_kvcache_append(*cache, request, n_tokens, k, v, stream);
  });
}

fold_status_t fold_decode_cuda(const fold_kvcache_t *cache, const fold_decode_params_t *params,
                               fold_tensor_t q, fold_tensor_t k_step, fold_tensor_t v_step,
                               fold_tensor_t out, float *lse, int64_t *stats, void *workspace,
                               size_t workspace_bytes, void *stream) {
  return fold::guarded("fold_decode_cuda", [&] {
    require_cuda_build();
    check_cuda_cache(cache);
    fold::cpu::check_params(*cache, params);
    const fold_kvcache_t &c = *cache;
    // A sliding window (window_before) and sinks run in the kernels' own instances (launch_decode).
    // sinks is device memory here: its values (finite or -inf) are the caller's to check, like
    // the other device data (decode.h).
    check_rows("q", q, params->n_heads, c.head_dim, c.batch, false);
    check_rows("out", out, params->n_heads, c.head_dim, c.batch, false);
    if (reinterpret_cast<uintptr_t>(lse) % 4 != 0) fold::fail("lse must be 4-byte aligned");
    if (reinterpret_cast<uintptr_t>(stats) % 8 != 0) fold::fail("stats must be 8-byte aligned");
    if (k_step.data != nullptr) {
      check_rows("k_step", k_step, c.n_kv_heads, c.head_dim, c.batch, false);
      check_rows("v_step", v_step, c.n_kv_heads, c.head_dim, c.batch, false);
    } else if (v_step.data != nullptr) {
      fold::fail("v_step is given without k_step");
    }
    const size_t need = fold::cuda::decode_workspace(c, params->n_heads, nullptr).total_bytes;
    if (need == 0) fold::fail("the workspace's size overflows size_t");
    if (workspace == nullptr || workspace_bytes < need)
      fold::fail("workspace must hold at least fold_decode_cuda_workspace_size() = " +
                 std::to_string(need) + " bytes");
    if (reinterpret_cast<uintptr_t>(workspace) % 256 != 0)
      fold::fail("workspace must be 256-byte aligned");
    check_cache_device(c,
                       {{"q", q.data},
                        {"k_step", k_step.data},
                        {"v_step", v_step.data},
                        {"out", out.data},
                        {"lse", lse},
                        {"stats", stats},
                        {"workspace", workspace},
                        {"params->sinks", params->sinks}},
                       stream);
    fold::cuda::launch_decode(c, fold::cpu::planned_params(c, *params), q, k_step, v_step, out, lse,
                              stats, workspace, stream);
  });
}

fold_status_t fold_decode_cuda_precheck(const fold_kvcache_t *cache, int32_t n_heads,
                                        fold_tensor_t q, fold_tensor_t k_step, fold_tensor_t v_step,
                                        int32_t *lengths_out, int32_t *nonfinite, void *stream) {
  return fold::guarded("fold_decode_cuda_precheck", [&] {
    require_cuda_build();
    check_cuda_cache(cache);
    const fold_kvcache_t &c = *cache;
    if (n_heads < 1 || n_heads % c.n_kv_heads != 0)
      fold::fail("n_heads must be a positive multiple of cache->n_kv_heads");
    check_rows("q", q, n_heads, c.head_dim, c.batch, false);
    if (k_step.data != nullptr) {
      check_rows("k_step", k_step, c.n_kv_heads, c.head_dim, c.batch, false);
      check_rows("v_step", v_step, c.n_kv_heads, c.head_dim, c.batch, false);
    } else if (v_step.data != nullptr) {
      fold::fail("v_step is given without k_step");
    }
    if (lengths_out == nullptr) fold::fail("lengths_out is NULL");
    if (nonfinite == nullptr) fold::fail("nonfinite is NULL");
    // (lengths_out and nonfinite are host memory: decode.h.)
    check_cache_device(c, {{"q", q.data}, {"k_step", k_step.data}, {"v_step", v_step.data}},
                       stream);
    fold::cuda::launch_decode_precheck(c, n_heads, q, k_step, v_step, lengths_out, nonfinite,
                                       stream);
  });
}

}  // extern "C"
