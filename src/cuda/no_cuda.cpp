// Launchers of a build without CUDA: every CUDA entry point reports it clearly.
#include "core/status.h"
#include "cuda/device_args.h"
#include "cuda/launch.h"

namespace fold::cuda {

namespace {
[[noreturn]] void no_cuda() {
  fail(FOLD_ERR_NO_CUDA, "this library was built without CUDA (no nvcc at build time)");
}
}  // namespace

// (The entry points refuse a build without CUDA before they check their device arguments.)
void check_device_args(const DeviceArg *, size_t, void *) {}

void launch_bwd_preprocess(const fold_attn_problem_t &, fold_tensor_t, fold_tensor_t, fold_tensor_t,
                           fold_tensor_t, float *, float *, int32_t *, const float *, void *) {
  no_cuda();
}

void launch_kv_bounds(const fold_attn_problem_t &, fold_tensor_t, fold_tensor_t, float *, void *) {
  no_cuda();
}

void launch_forward(const fold_attn_problem_t &, fold_tensor_t, fold_tensor_t, fold_tensor_t,
                    fold_tensor_t, float *, float *, void *) {
  no_cuda();
}

void launch_backward(const fold_attn_problem_t &, fold_tensor_t, fold_tensor_t, fold_tensor_t,
                     fold_tensor_t, fold_tensor_t, const float *, fold_tensor_t, fold_tensor_t,
                     fold_tensor_t, const float *, void *, void *) {
  no_cuda();
}

void launch_kvcache_append(const fold_kvcache_t &, int32_t, int32_t, fold_tensor_t, fold_tensor_t,
                           void *) {
  no_cuda();
}

void launch_decode(const fold_kvcache_t &, const fold_decode_params_t &, fold_tensor_t,
                   fold_tensor_t, fold_tensor_t, fold_tensor_t, float *, int64_t *, void *,
                   void *) {
  no_cuda();
}

void launch_decode_precheck(const fold_kvcache_t &, int, fold_tensor_t, fold_tensor_t,
                            fold_tensor_t, int32_t *, int32_t *, void *) {
  no_cuda();
}

}  // namespace fold::cuda
