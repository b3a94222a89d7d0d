// C entry points of the CUDA backend. Validation happens here, on the host, without
// reading device memory; the kernels themselves never address memory outside the views
// even when cu_seqlens is malformed (problem.h clamps it).
#include <cstdint>
#include <string>

#include "core/status.h"
#include "core/validate.h"
#include "cuda/launch.h"
#include "fold_attention/fold_attention.h"

namespace {

// The kernels load 16 bytes at a time: 16-bit data, head_dim % 8 == 0, aligned views.
void check_cuda_view(const char *name, const fold_tensor_t &t, const fold_attn_problem_t &p) {
  const std::string n(name);
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0)
    fold::fail(FOLD_ERR_UNSUPPORTED, n + ": data must be 16-byte aligned on CUDA");
  if (t.token_stride % 8 != 0 || t.head_stride % 8 != 0 ||
      (p.cu_seqlens == nullptr && t.batch_stride % 8 != 0))
    fold::fail(FOLD_ERR_UNSUPPORTED, n + ": strides must be multiples of 8 elements on CUDA");
}

void check_cuda_problem(const fold_attn_problem_t *p) {
  fold::check_problem(p, false);
  if (p->dtype != FOLD_DTYPE_BF16 && p->dtype != FOLD_DTYPE_F16)
    fold::fail(FOLD_ERR_UNSUPPORTED, "dtype: CUDA kernels take bf16 or fp16");
  if (p->head_dim % 8 != 0)
    fold::fail(FOLD_ERR_UNSUPPORTED,
               "head_dim=" + std::to_string(p->head_dim) + ": CUDA kernels need a multiple of 8");
  if (p->cu_seqlens != nullptr && p->total_tokens > 0 && p->seqlen < 1)
    fold::fail("seqlen (max_seqlen) must be >= 1 for a packed batch on CUDA");
}

}  // namespace

extern "C" {

fold_status_t fold_bwd_preprocess_cuda(const fold_attn_problem_t *p, fold_tensor_t k,
                                       fold_tensor_t v, fold_tensor_t out, fold_tensor_t dout,
                                       float *delta, float *bounds, void *stream) {
  return fold::guarded("fold_bwd_preprocess_cuda", [&] {
    check_cuda_problem(p);
    const struct {
      const char *name;
      const fold_tensor_t &t;
      int heads;
    } views[] = {{"k", k, p->n_kv_heads},
                 {"v", v, p->n_kv_heads},
                 {"out", out, p->n_heads},
                 {"dout", dout, p->n_heads}};
    for (const auto &view : views) {
      fold::check_tensor(view.name, view.t, *p, view.heads);
      if (p->total_tokens > 0) check_cuda_view(view.name, view.t, *p);
    }
    fold::check_pointer("delta", delta, *p);
    if (bounds == nullptr) fold::fail("bounds is NULL");
    fold::cuda::launch_bwd_preprocess(*p, k, v, out, dout, delta, bounds, stream);
  });
}

}  // extern "C"
