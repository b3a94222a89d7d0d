#include "core/validate.h"

#include <cmath>
#include <string>

#include "core/status.h"

namespace fold {

namespace {

// Limits that keep every offset and size computation inside int64 (and the CUDA grid's y/z
// dimensions inside their range), whatever the caller passes.
constexpr int64_t kMaxTokens = int64_t{1} << 36;
constexpr int32_t kMaxHeads = 65535;

int64_t mul_add_checked(int64_t a, int64_t b, int64_t c, const std::string &what) {
  int64_t prod = 0, sum = 0;
  if (__builtin_mul_overflow(a, b, &prod) || __builtin_add_overflow(prod, c, &sum))
    fail(what + ": the view's extent overflows 64-bit offsets");
  return sum;
}

// Offset (in elements) of the last element a view addresses, overflow-checked.
int64_t last_offset(const char *name, const fold_tensor_t &t, const fold_attn_problem_t &p,
                    int heads) {
  const std::string n(name);
  const int64_t rows =
      p.cu_seqlens == nullptr
          ? mul_add_checked(
                static_cast<int64_t>(p.batch) - 1, t.batch_stride,
                mul_add_checked(static_cast<int64_t>(p.seqlen) - 1, t.token_stride, 0, n), n)
          : mul_add_checked(p.total_tokens - 1, t.token_stride, 0, n);
  return mul_add_checked(static_cast<int64_t>(heads) - 1, t.head_stride,
                         mul_add_checked(1, rows, p.head_dim - 1, n), n);
}

// Elements a view spans (its last offset + 1), overflow-checked.
int64_t element_count(const char *name, const fold_tensor_t &t, const fold_attn_problem_t &p,
                      int heads) {
  return mul_add_checked(1, last_offset(name, t, p, heads), 1, name);
}

}  // namespace

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
  if (p->n_heads > kMaxHeads)
    fail("n_heads=" + std::to_string(p->n_heads) + " exceeds " + std::to_string(kMaxHeads));
  if (p->n_heads % p->n_kv_heads != 0)
    fail("n_heads=" + std::to_string(p->n_heads) +
         " is not a multiple of n_kv_heads=" + std::to_string(p->n_kv_heads));
  if (p->head_dim < 1 || p->head_dim > FOLD_MAX_HEAD_DIM)
    fail("head_dim=" + std::to_string(p->head_dim) + " is outside 1.." +
         std::to_string(FOLD_MAX_HEAD_DIM));
  dtype_size(p->dtype);
  if (p->causal != 0 && p->causal != 1)
    fail("causal=" + std::to_string(p->causal) + " must be 0 or 1");
  if (p->window_before < 0)
    fail("window_before=" + std::to_string(p->window_before) + " must be >= 0 (0: unbounded)");
  if (p->window_after < 0)
    fail("window_after=" + std::to_string(p->window_after) + " must be >= 0 (0: unbounded)");
  if (p->sinks != nullptr && reinterpret_cast<uintptr_t>(p->sinks) % 4 != 0)
    fail("sinks must be 4-byte aligned");
  if (!std::isfinite(p->softmax_scale) || !(p->softmax_scale > 0.0f))
    fail("softmax_scale=" + std::to_string(p->softmax_scale) + " must be finite and > 0");
  if (p->total_tokens < 0 || p->total_tokens > kMaxTokens)
    fail("total_tokens=" + std::to_string(p->total_tokens) + " is outside 0..2^36");
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

void check_floats(const char *name, const void *ptr, int64_t elems, const fold_attn_problem_t &p) {
  check_pointer(name, ptr, p);
  if (p.total_tokens == 0) return;
  if (reinterpret_cast<uintptr_t>(ptr) % 4 != 0)
    fail(std::string(name) + " must be 4-byte aligned (float32)");
  check_byte_extent(name, ptr, elems, 4);
}

void check_byte_extent(const char *name, const void *data, int64_t elems, int elem_size) {
  // The element offsets stayed in int64; the byte offsets and the end address must too (a
  // stride of 2^62 elements is 2^64 bytes: the addresses would wrap onto other memory).
  int64_t bytes = 0;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(data);
  if (elems < 0 || __builtin_mul_overflow(elems, static_cast<int64_t>(elem_size), &bytes) ||
      lo + static_cast<uintptr_t>(bytes) < lo)
    fail(std::string(name) + ": the view's extent overflows the address space");
}

void check_tensor(const char *name, const fold_tensor_t &t, const fold_attn_problem_t &p, int heads,
                  bool output) {
  const std::string n(name);
  check_pointer(name, t.data, p);
  if (p.total_tokens == 0) return;
  if (t.head_stride < 0 || t.token_stride < 0 || t.batch_stride < 0)
    fail(n + ": strides must be non-negative");
  const int es = dtype_size(p.dtype);
  if (reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(es) != 0)
    fail(n + ": data must be aligned to its element size (" + std::to_string(es) + " bytes)");
  // Every address the kernels form stays in int64 elements, and in the address space in bytes.
  check_byte_extent(name, t.data, element_count(name, t, p, heads), es);
  if (!output) return;
  if (t.head_stride < p.head_dim && heads > 1)
    fail(n + ": head_stride=" + std::to_string(t.head_stride) +
         " is below head_dim=" + std::to_string(p.head_dim) + " (output heads would overlap)");
  if (t.token_stride < mul_add_checked(heads - 1, t.head_stride, p.head_dim, n))
    fail(n + ": token_stride=" + std::to_string(t.token_stride) +
         " is below (heads - 1) * head_stride + head_dim (output rows would overlap)");
  if (p.cu_seqlens == nullptr && p.batch > 1 &&
      t.batch_stride < mul_add_checked(p.seqlen, t.token_stride, 0, n))
    fail(n + ": batch_stride=" + std::to_string(t.batch_stride) +
         " is below seqlen * token_stride (output requests would overlap)");
}

Extent view_extent(const char *name, const fold_tensor_t &t, const fold_attn_problem_t &p,
                   int heads, int elem_size) {
  const uintptr_t lo = reinterpret_cast<uintptr_t>(t.data);
  if (p.total_tokens == 0) return Extent{lo, lo, name};
  const int64_t elems = element_count(name, t, p, heads);
  return Extent{lo, lo + static_cast<uintptr_t>(elems) * static_cast<uintptr_t>(elem_size), name};
}

Extent array_extent(const char *name, const void *data, int64_t elems, int elem_size) {
  const uintptr_t lo = reinterpret_cast<uintptr_t>(data);
  return Extent{lo, lo + static_cast<uintptr_t>(elems) * static_cast<uintptr_t>(elem_size), name};
}

void check_disjoint(const std::vector<Extent> &written) {
  for (size_t i = 0; i < written.size(); ++i)
    for (size_t j = i + 1; j < written.size(); ++j)
      if (written[i].lo < written[j].hi && written[j].lo < written[i].hi)
        fail(std::string(written[i].name) + " and " + written[j].name +
             " overlap (written outputs must be disjoint)");
}

}  // namespace fold
