// Host-side checks of a problem description and of each tensor view, with messages that
// name the offending argument. They throw fold::Error (see status.h).
#pragma once

#include <cstdint>
#include <vector>

#include "fold_attention/fold_attention.h"

namespace fold {

// Shapes and options. With host_cu_seqlens, the offsets themselves are checked too
// (start at 0, non-decreasing, end at total_tokens, no request longer than seqlen when
// seqlen > 0).
void check_problem(const fold_attn_problem_t *p, bool host_cu_seqlens);

// A [tokens, heads, head_dim] view: non-null data when there is any token. Inputs may use any
// non-negative strides (head-major storage, broadcast K/V); outputs must be laid out
// request > token > head > dim without overlap, since they are written.
void check_tensor(const char *name, const fold_tensor_t &t, const fold_attn_problem_t &p, int heads,
                  bool output = false);

void check_pointer(const char *name, const void *ptr, const fold_attn_problem_t &p);

// A float32 array of `elems` (lse, delta): non-null when there is any token, 4-byte aligned, its
// bytes inside the address space.
void check_floats(const char *name, const void *ptr, int64_t elems, const fold_attn_problem_t &p);

// elems x elem_size bytes from data: the byte count in int64 and the end address not wrapping.
void check_byte_extent(const char *name, const void *data, int64_t elems, int elem_size);

// Byte range [lo, hi) that a view (or a flat array) touches.
struct Extent {
  uintptr_t lo, hi;
  const char *name;
};
Extent view_extent(const char *name, const fold_tensor_t &t, const fold_attn_problem_t &p,
                   int heads, int elem_size);
Extent array_extent(const char *name, const void *data, int64_t elems, int elem_size);
// Fails when two of the (written) ranges overlap: outputs must be disjoint, or a
// multithreaded reference or a kernel would race on them.
void check_disjoint(const std::vector<Extent> &written);

int dtype_size(int dtype);

}  // namespace fold
