// Host-side launchers of the CUDA kernels, called by the C entry points after validation.
// In a build without CUDA, each throws FOLD_ERR_NO_CUDA ("built without CUDA").
#pragma once

#include "fold_attention/fold_attention.h"

namespace fold::cuda {

void launch_bwd_preprocess(const fold_attn_problem_t &p, fold_tensor_t k, fold_tensor_t v,
                           fold_tensor_t out, fold_tensor_t dout, float *delta, float *bounds,
                           void *stream);

}  // namespace fold::cuda
