// Launchers of a build without CUDA: every CUDA entry point reports it clearly.
#include "core/status.h"
#include "cuda/launch.h"

namespace fold::cuda {

namespace {
[[noreturn]] void no_cuda() {
  fail(FOLD_ERR_NO_CUDA, "this library was built without CUDA (no nvcc at build time)");
}
}  // namespace

void launch_bwd_preprocess(const fold_attn_problem_t &, fold_tensor_t, fold_tensor_t, fold_tensor_t,
                           fold_tensor_t, float *, float *, void *) {
  no_cuda();
}

}  // namespace fold::cuda
