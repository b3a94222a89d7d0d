// The CPU reference backend: the executable specification of the training operations.
// The C entry points (capi) validate and then call these.
#pragma once

#include <cstdint>

#include "fold_attention/fold_attention.h"

namespace fold::cpu {

void forward(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k, fold_tensor_t v,
             fold_tensor_t out, float *lse);

void bwd_preprocess(const fold_attn_problem_t &p, fold_tensor_t k, fold_tensor_t v,
                    fold_tensor_t out, fold_tensor_t dout, float *delta, float *bounds);

// Test hooks for the backward. The canonical order (no hook) visits key blocks in
// increasing order and, inside one, heads then query blocks in increasing order.
struct BackwardOrder {
  uint64_t key_block_seed = 0;  // != 0: visit key blocks in a seeded random order
  uint64_t inner_seed = 0;      // != 0: visit (head, query block) pairs in a random order
};

// What the integer grid saw, in grid units (scaled by 2^s) and dS units (scaled by 2^t).
struct BackwardStats {
  double max_abs_partial = 0;  // largest |dQ partial| before rounding to int32
  double max_abs_sum = 0;      // largest |dQ sum| (exact, in int64)
  double max_abs_ds = 0;       // largest |dS * 2^t| (the 16-bit operand)
};

void backward(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k, fold_tensor_t v,
              fold_tensor_t out, fold_tensor_t dout, const float *lse, fold_tensor_t dq,
              fold_tensor_t dk, fold_tensor_t dv, const BackwardOrder *order = nullptr,
              BackwardStats *stats = nullptr);

}  // namespace fold::cpu
