// C entry points of the CPU reference backend: validate, then run the reference.
#include "core/status.h"
#include "core/validate.h"
#include "cpu/reference.h"
#include "fold_attention/fold_attention.h"

namespace {

void check_qkv(const fold_attn_problem_t *p, const fold_tensor_t &q, const fold_tensor_t &k,
               const fold_tensor_t &v) {
  fold::check_problem(p, true);
  fold::check_tensor("q", q, *p, p->n_heads);
  fold::check_tensor("k", k, *p, p->n_kv_heads);
  fold::check_tensor("v", v, *p, p->n_kv_heads);
}

}  // namespace

extern "C" {

fold_status_t fold_fwd_cpu(const fold_attn_problem_t *p, fold_tensor_t q, fold_tensor_t k,
                           fold_tensor_t v, fold_tensor_t out, float *lse) {
  return fold::guarded("fold_fwd_cpu", [&] {
    check_qkv(p, q, k, v);
    fold::check_tensor("out", out, *p, p->n_heads, true);
    fold::check_floats("lse", lse, p->total_tokens * p->n_heads, *p);
    const int es = fold::dtype_size(p->dtype);
    fold::check_disjoint({fold::view_extent("out", out, *p, p->n_heads, es),
                          fold::array_extent("lse", lse, p->total_tokens * p->n_heads, 4)});
    fold::cpu::forward(*p, q, k, v, out, lse);
  });
}

fold_status_t fold_bwd_preprocess_cpu(const fold_attn_problem_t *p, fold_tensor_t k,
                                      fold_tensor_t v, fold_tensor_t out, fold_tensor_t dout,
                                      float *delta, float *bounds) {
  return fold::guarded("fold_bwd_preprocess_cpu", [&] {
    fold::check_problem(p, true);
    fold::check_tensor("k", k, *p, p->n_kv_heads);
    fold::check_tensor("v", v, *p, p->n_kv_heads);
    fold::check_tensor("out", out, *p, p->n_heads);
    fold::check_tensor("dout", dout, *p, p->n_heads);
    fold::check_floats("delta", delta, p->total_tokens * p->n_heads, *p);
    if (bounds == nullptr) fold::fail("bounds is NULL");
    if (reinterpret_cast<uintptr_t>(bounds) % 4 != 0) fold::fail("bounds must be 4-byte aligned");
    fold::check_disjoint(
        {fold::array_extent("delta", delta, p->total_tokens * p->n_heads, 4),
         fold::array_extent("bounds", bounds,
                            static_cast<int64_t>(p->batch) * p->n_kv_heads * FOLD_BWD_BOUNDS, 4)});
    fold::cpu::bwd_preprocess(*p, k, v, out, dout, delta, bounds);
  });
}

fold_status_t fold_bwd_cpu(const fold_attn_problem_t *p, fold_tensor_t q, fold_tensor_t k,
                           fold_tensor_t v, fold_tensor_t out, fold_tensor_t dout, const float *lse,
                           fold_tensor_t dq, fold_tensor_t dk, fold_tensor_t dv) {
  return fold::guarded("fold_bwd_cpu", [&] {
    check_qkv(p, q, k, v);
    fold::check_tensor("out", out, *p, p->n_heads);
    fold::check_tensor("dout", dout, *p, p->n_heads);
    fold::check_floats("lse", lse, p->total_tokens * p->n_heads, *p);
    fold::check_tensor("dq", dq, *p, p->n_heads, true);
    fold::check_tensor("dk", dk, *p, p->n_kv_heads, true);
    fold::check_tensor("dv", dv, *p, p->n_kv_heads, true);
    const int es = fold::dtype_size(p->dtype);
    fold::check_disjoint({fold::view_extent("dq", dq, *p, p->n_heads, es),
                          fold::view_extent("dk", dk, *p, p->n_kv_heads, es),
                          fold::view_extent("dv", dv, *p, p->n_kv_heads, es)});
    fold::cpu::backward(*p, q, k, v, out, dout, lse, dq, dk, dv);
  });
}

}  // extern "C"
