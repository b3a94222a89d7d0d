// C entry points of the CUDA backend. Validation happens here, on the host, without
// reading device memory; the kernels themselves never address memory outside the views
// even when cu_seqlens is malformed (problem.h clamps it).
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/validate.h"
#include "cuda/device_args.h"
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

using fold::check_disjoint;
using fold::Extent;

Extent view_extent(const char *name, const fold_tensor_t &t, const fold_attn_problem_t &p,
                   int heads) {
  return fold::view_extent(name, t, p, heads, 2);  // CUDA views are 16-bit
}

// A build without CUDA says so before judging the arguments (as the launchers would).
void require_cuda_build() {
  if (!fold_built_with_cuda())
    fold::fail(FOLD_ERR_NO_CUDA, "this library was built without CUDA (no nvcc at build time)");
}

void check_training_head_dim(const fold_attn_problem_t *p) {
  if (!fold::cuda::training_head_dim_supported(p->head_dim))
    fold::fail(FOLD_ERR_UNSUPPORTED, "head_dim=" + std::to_string(p->head_dim) +
                                         ": the CUDA training kernels take 64, 96, 128 or 256");
}

struct NamedView {
  const char *name;
  const fold_tensor_t &t;
  int heads;
  bool output;
};

void check_views(const fold_attn_problem_t *p, std::initializer_list<NamedView> views) {
  for (const auto &view : views) {
    fold::check_tensor(view.name, view.t, *p, view.heads, view.output);
    if (p->total_tokens > 0) check_cuda_view(view.name, view.t, *p);
  }
}

Extent kv_bounds_extent(const fold_attn_problem_t &p, const float *kv_bounds) {
  return fold::array_extent("kv_bounds", kv_bounds,
                            static_cast<int64_t>(fold::cuda::bounds_bytes(p) / sizeof(float)), 4);
}

void check_bounds_pointer(const char *name, const float *bounds) {
  if (reinterpret_cast<uintptr_t>(bounds) % 4 != 0)
    fold::fail(std::string(name) + " must be 4-byte aligned");
}

// fold_fwd_cuda and fold_fwd_cuda_kv_bounds (kv_bounds NULL: none).
void forward(const fold_attn_problem_t *p, fold_tensor_t q, fold_tensor_t k, fold_tensor_t v,
             fold_tensor_t out, float *lse, float *kv_bounds, void *stream) {
  require_cuda_build();
  check_cuda_problem(p);
  check_training_head_dim(p);
  check_views(p, {{"q", q, p->n_heads, false},
                  {"k", k, p->n_kv_heads, false},
                  {"v", v, p->n_kv_heads, false},
                  {"out", out, p->n_heads, true}});
  fold::check_floats("lse", lse, p->total_tokens * p->n_heads, *p);
  if (kv_bounds != nullptr) check_bounds_pointer("kv_bounds", kv_bounds);
  if (p->total_tokens == 0)  // nothing to compute; the launcher still zeroes kv_bounds
    return fold::cuda::launch_forward(*p, q, k, v, out, lse, kv_bounds, stream);
  std::vector<Extent> written = {view_extent("out", out, *p, p->n_heads),
                                 fold::array_extent("lse", lse, p->total_tokens * p->n_heads, 4)};
  if (kv_bounds != nullptr) written.push_back(kv_bounds_extent(*p, kv_bounds));
  check_disjoint(written);
  fold::cuda::check_device_args({{"q", q.data},
                                 {"k", k.data},
                                 {"v", v.data},
                                 {"out", out.data},
                                 {"lse", lse},
                                 {"kv_bounds", kv_bounds},
                                 {"cu_seqlens", p->cu_seqlens},
                                 {"sinks", p->sinks}},
                                stream);
  fold::cuda::launch_forward(*p, q, k, v, out, lse, kv_bounds, stream);
}

// fold_bwd_cuda and fold_bwd_cuda_kv_bounds (kv_bounds NULL: the preprocess reads k and v).
void backward(const fold_attn_problem_t *p, fold_tensor_t q, fold_tensor_t k, fold_tensor_t v,
              fold_tensor_t out, fold_tensor_t dout, const float *lse, fold_tensor_t dq,
              fold_tensor_t dk, fold_tensor_t dv, const float *kv_bounds, void *workspace,
              size_t workspace_bytes, void *stream) {
  require_cuda_build();
  check_cuda_problem(p);
  check_training_head_dim(p);
  check_views(p, {{"q", q, p->n_heads, false},
                  {"k", k, p->n_kv_heads, false},
                  {"v", v, p->n_kv_heads, false},
                  {"out", out, p->n_heads, false},
                  {"dout", dout, p->n_heads, false},
                  {"dq", dq, p->n_heads, true},
                  {"dk", dk, p->n_kv_heads, true},
                  {"dv", dv, p->n_kv_heads, true}});
  fold::check_floats("lse", lse, p->total_tokens * p->n_heads, *p);
  if (kv_bounds != nullptr) check_bounds_pointer("kv_bounds", kv_bounds);
  if (p->total_tokens == 0) return;
  const size_t need = fold::cuda::backward_workspace(*p, nullptr).total_bytes;
  if (workspace == nullptr) fold::fail("workspace is NULL");
  if (reinterpret_cast<uintptr_t>(workspace) % 16 != 0)
    fold::fail("workspace must be 16-byte aligned");
  if (workspace_bytes < need)
    fold::fail("workspace_bytes=" + std::to_string(workspace_bytes) +
               " is below fold_bwd_cuda_workspace_size()=" + std::to_string(need));
  std::vector<Extent> written = {
      view_extent("dq", dq, *p, p->n_heads), view_extent("dk", dk, *p, p->n_kv_heads),
      view_extent("dv", dv, *p, p->n_kv_heads),
      fold::array_extent("workspace", workspace, static_cast<int64_t>(need), 1)};
  // kv_bounds is only read, but it is copied into the workspace: the two may not overlap.
  if (kv_bounds != nullptr) written.push_back(kv_bounds_extent(*p, kv_bounds));
  check_disjoint(written);
  fold::cuda::check_device_args({{"q", q.data},
                                 {"k", k.data},
                                 {"v", v.data},
                                 {"out", out.data},
                                 {"dout", dout.data},
                                 {"lse", lse},
                                 {"dq", dq.data},
                                 {"dk", dk.data},
                                 {"dv", dv.data},
                                 {"kv_bounds", kv_bounds},
                                 {"workspace", workspace},
                                 {"cu_seqlens", p->cu_seqlens},
                                 {"sinks", p->sinks}},
                                stream);
  fold::cuda::launch_backward(*p, q, k, v, out, dout, lse, dq, dk, dv, kv_bounds, workspace,
                              stream);
}

}  // namespace

extern "C" {

fold_status_t fold_bwd_preprocess_cuda(const fold_attn_problem_t *p, fold_tensor_t k,
                                       fold_tensor_t v, fold_tensor_t out, fold_tensor_t dout,
                                       float *delta, float *bounds, void *stream) {
  return fold::guarded("fold_bwd_preprocess_cuda", [&] {
    require_cuda_build();
    check_cuda_problem(p);
    check_views(p, {{"k", k, p->n_kv_heads, false},
                    {"v", v, p->n_kv_heads, false},
                    {"out", out, p->n_heads, false},
                    {"dout", dout, p->n_heads, false}});
    fold::check_floats("delta", delta, p->total_tokens * p->n_heads, *p);
    if (bounds == nullptr) fold::fail("bounds is NULL");
    check_bounds_pointer("bounds", bounds);
    // The same checks as fold_bwd_preprocess_cpu: the two outputs may not overlap.
    if (p->total_tokens > 0)
      check_disjoint({fold::array_extent("delta", delta, p->total_tokens * p->n_heads, 4),
                      fold::array_extent(
                          "bounds", bounds,
                          static_cast<int64_t>(p->batch) * p->n_kv_heads * FOLD_BWD_BOUNDS, 4)});
    // (Without tokens only bounds is written: the others are not checked.)
    const fold::cuda::DeviceArg args[] = {{"k", k.data},     {"v", v.data},
                                          {"out", out.data}, {"dout", dout.data},
                                          {"delta", delta},  {"cu_seqlens", p->cu_seqlens},
                                          {"bounds", bounds}};
    constexpr size_t kAll = sizeof(args) / sizeof(args[0]);
    if (p->total_tokens > 0)
      fold::cuda::check_device_args(args, kAll, stream);
    else
      fold::cuda::check_device_args(args + kAll - 1, 1, stream);
    fold::cuda::launch_bwd_preprocess(*p, k, v, out, dout, delta, bounds, nullptr, nullptr, stream);
  });
}

fold_status_t fold_fwd_cuda(const fold_attn_problem_t *p, fold_tensor_t q, fold_tensor_t k,
                            fold_tensor_t v, fold_tensor_t out, float *lse, void *stream) {
  return fold::guarded("fold_fwd_cuda", [&] { forward(p, q, k, v, out, lse, nullptr, stream); });
}

fold_status_t fold_fwd_cuda_kv_bounds(const fold_attn_problem_t *p, fold_tensor_t q,
                                      fold_tensor_t k, fold_tensor_t v, fold_tensor_t out,
                                      float *lse, float *kv_bounds, void *stream) {
  return fold::guarded("fold_fwd_cuda_kv_bounds", [&] {
    require_cuda_build();
    if (kv_bounds == nullptr) fold::fail("kv_bounds is NULL");
    forward(p, q, k, v, out, lse, kv_bounds, stream);
  });
}

size_t fold_bwd_cuda_workspace_size(const fold_attn_problem_t *p) {
  // 0 (with fold_last_error set) for a problem fold_bwd_cuda would reject: the sizes below
  // are only meaningful, and free of overflow, for a validated problem.
  size_t bytes = 0;
  const fold_status_t status = fold::guarded("fold_bwd_cuda_workspace_size", [&] {
    check_cuda_problem(p);
    check_training_head_dim(p);
    bytes = fold::cuda::backward_workspace(*p, nullptr).total_bytes;
  });
  return status == FOLD_OK ? bytes : 0;
}

fold_status_t fold_bwd_cuda(const fold_attn_problem_t *p, fold_tensor_t q, fold_tensor_t k,
                            fold_tensor_t v, fold_tensor_t out, fold_tensor_t dout,
                            const float *lse, fold_tensor_t dq, fold_tensor_t dk, fold_tensor_t dv,
                            void *workspace, size_t workspace_bytes, void *stream) {
  return fold::guarded("fold_bwd_cuda", [&] {
    backward(p, q, k, v, out, dout, lse, dq, dk, dv, nullptr, workspace, workspace_bytes, stream);
  });
}

fold_status_t fold_bwd_cuda_kv_bounds(const fold_attn_problem_t *p, fold_tensor_t q,
                                      fold_tensor_t k, fold_tensor_t v, fold_tensor_t out,
                                      fold_tensor_t dout, const float *lse, fold_tensor_t dq,
                                      fold_tensor_t dk, fold_tensor_t dv, const float *kv_bounds,
                                      void *workspace, size_t workspace_bytes, void *stream) {
  return fold::guarded("fold_bwd_cuda_kv_bounds", [&] {
    backward(p, q, k, v, out, dout, lse, dq, dk, dv, kv_bounds, workspace, workspace_bytes, stream);
  });
}

}  // extern "C"
