// Host-side launchers of the CUDA kernels, called by the C entry points after validation.
// In a build without CUDA, each throws FOLD_ERR_NO_CUDA ("built without CUDA").
#pragma once

#include <cstddef>
#include <cstdint>

#include "fold_attention/fold_attention.h"

namespace fold::cuda {

// Head dimensions the CUDA training kernels are compiled for.
inline bool training_head_dim_supported(int head_dim) {
  return head_dim == 64 || head_dim == 96 || head_dim == 128 || head_dim == 256;
}

// The backward's workspace, carved from one caller-provided buffer (256-byte aligned parts):
//   delta   float32 [n_heads, total_tokens]
//   bounds  float32 [batch, n_kv_heads, FOLD_BWD_BOUNDS]
//   dq_grid int32   [total_tokens, n_heads, head_dim]
struct BackwardWorkspace {
  float *delta;
  float *bounds;
  int32_t *dq_grid;
  size_t dq_grid_bytes;
  size_t total_bytes;
};

inline size_t align256(size_t n) { return (n + 255) / 256 * 256; }

inline BackwardWorkspace backward_workspace(const fold_attn_problem_t &p, void *base) {
  const size_t delta_bytes =
      align256(static_cast<size_t>(p.n_heads) * static_cast<size_t>(p.total_tokens) * 4);
  const size_t bounds_bytes =
      align256(static_cast<size_t>(p.batch) * p.n_kv_heads * FOLD_BWD_BOUNDS * 4);
  const size_t grid_bytes = static_cast<size_t>(p.total_tokens) * p.n_heads * p.head_dim * 4;
  BackwardWorkspace ws{nullptr, nullptr, nullptr, grid_bytes,
                       delta_bytes + bounds_bytes + align256(grid_bytes)};
  if (base != nullptr) {  // (no pointer arithmetic on NULL when only the size is asked)
    char *c = static_cast<char *>(base);
    ws.delta = reinterpret_cast<float *>(c);
    ws.bounds = reinterpret_cast<float *>(c + delta_bytes);
    ws.dq_grid = reinterpret_cast<int32_t *>(c + delta_bytes + bounds_bytes);
  }
  return ws;
}

void launch_bwd_preprocess(const fold_attn_problem_t &p, fold_tensor_t k, fold_tensor_t v,
                           fold_tensor_t out, fold_tensor_t dout, float *delta, float *bounds,
                           void *stream);

void launch_forward(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k,
                    fold_tensor_t v, fold_tensor_t out, float *lse, void *stream);

// Runs preprocess, main kernel and postprocess on `stream`; `workspace` holds at least
// backward_workspace(p, nullptr).total_bytes bytes.
void launch_backward(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k,
                     fold_tensor_t v, fold_tensor_t out, fold_tensor_t dout, const float *lse,
                     fold_tensor_t dq, fold_tensor_t dk, fold_tensor_t dv, void *workspace,
                     void *stream);

}  // namespace fold::cuda
