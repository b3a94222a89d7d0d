#include "core/validate.h"

#include <cmath>
#include <string>

#include "core/status.h"

namespace fold {

int dtype_size(int dtype) {
  switch (dtype) {
    case FOLD_DTYPE_F32:
      return 4;
    case FOLD_DTYPE_F16:
    case FOLD_DTYPE_BF16:
      return 2;
    default:
      fail("dtype=" + std::to_string(dtype) + " is not one of FOLD_DTYPE_F32/F16/BF16");
  }
}

void check_problem(const fold_attn_problem_t *p, bool host_cu_seqlens) {
  if (p == nullptr) fail("problem is NULL");
  if (p->batch < 1) fail("batch=" + std::to_string(p->batch) + " must be >= 1");
  if (p->seqlen < 0) fail("seqlen=" + std::to_string(p->seqlen) + " must be >= 0");
  if (p->n_heads < 1) fail("n_heads=" + std::to_string(p->n_heads) + " must be >= 1");
  if (p->n_kv_heads < 1) fail("n_kv_heads=" + std::to_string(p->n_kv_heads) + " must be >= 1");
  if (p->n_heads % p->n_kv_heads != 0)
    fail("n_heads=" + std::to_string(p->n_heads) +
         " is not a multiple of n_kv_heads=" + std::to_string(p->n_kv_heads));
  if (p->head_dim < 1 || p->head_dim > FOLD_MAX_HEAD_DIM)
    fail("head_dim=" + std::to_string(p->head_dim) + " is outside 1.." +
         std::to_string(FOLD_MAX_HEAD_DIM));
  dtype_size(p->dtype);
  if (p->causal != 0 && p->causal != 1)
    fail("causal=" + std::to_string(p->causal) + " must be 0 or 1");
  if (!std::isfinite(p->softmax_scale) || !(p->softmax_scale > 0.0f))
    fail("softmax_scale=" + std::to_string(p->softmax_scale) + " must be finite and > 0");
  if (p->total_tokens < 0) fail("total_tokens must be >= 0");
  if (p->cu_seqlens == nullptr) {
    if (p->total_tokens != static_cast<int64_t>(p->batch) * p->seqlen)
      fail("total_tokens=" + std::to_string(p->total_tokens) +
           " != batch * seqlen = " + std::to_string(static_cast<int64_t>(p->batch) * p->seqlen));
    return;
  }
  if (!host_cu_seqlens) return;
  const int32_t *cu = p->cu_seqlens;
  if (cu[0] != 0) fail("cu_seqlens[0]=" + std::to_string(cu[0]) + " must be 0");
  for (int b = 0; b < p->batch; ++b) {
    const int64_t len = static_cast<int64_t>(cu[b + 1]) - cu[b];
    if (len < 0)
      fail("cu_seqlens must be non-decreasing (cu_seqlens[" + std::to_string(b + 1) +
           "]=" + std::to_string(cu[b + 1]) + " < cu_seqlens[" + std::to_string(b) +
           "]=" + std::to_string(cu[b]) + ")");
    if (p->seqlen > 0 && len > p->seqlen)
      fail("request " + std::to_string(b) + " has " + std::to_string(len) +
           " tokens, more than seqlen (max_seqlen)=" + std::to_string(p->seqlen));
  }
  if (cu[p->batch] != p->total_tokens)
    fail("cu_seqlens[-1]=" + std::to_string(cu[p->batch]) +
         " must equal total_tokens=" + std::to_string(p->total_tokens));
}

void check_pointer(const char *name, const void *ptr, const fold_attn_problem_t &p) {
  if (ptr == nullptr && p.total_tokens > 0) fail(std::string(name) + " is NULL");
}

void check_tensor(const char *name, const fold_tensor_t &t, const fold_attn_problem_t &p, int heads,
                  bool output) {
  const std::string n(name);
  check_pointer(name, t.data, p);
  if (p.total_tokens == 0) return;
  if (t.head_stride < 0 || t.token_stride < 0 || t.batch_stride < 0)
    fail(n + ": strides must be non-negative");
  if (!output) return;
  if (t.head_stride < p.head_dim && heads > 1)
    fail(n + ": head_stride=" + std::to_string(t.head_stride) +
         " is below head_dim=" + std::to_string(p.head_dim) + " (output heads would overlap)");
  if (t.token_stride < static_cast<int64_t>(heads - 1) * t.head_stride + p.head_dim)
    fail(n + ": token_stride=" + std::to_string(t.token_stride) +
         " is below (heads - 1) * head_stride + head_dim (output rows would overlap)");
  if (p.cu_seqlens == nullptr && p.batch > 1 &&
      t.batch_stride < static_cast<int64_t>(p.seqlen) * t.token_stride)
    fail(n + ": batch_stride=" + std::to_string(t.batch_stride) +
         " is below seqlen * token_stride (output requests would overlap)");
}

}  // namespace fold
