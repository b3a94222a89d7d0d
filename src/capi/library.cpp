// Library-level C entry points: version, build features, problem checks.
#include <cstddef>

#include "core/status.h"
#include "core/validate.h"
#include "fold_attention/fold_attention.h"

// The Python binding (_lib.FoldAttnProblem) mirrors this layout with ctypes; its test checks
// the same offsets from the other side.
static_assert(sizeof(fold_attn_problem_t) == 64, "fold_attn_problem_t layout changed");
static_assert(offsetof(fold_attn_problem_t, softmax_scale) == 44, "layout changed");
static_assert(offsetof(fold_attn_problem_t, window_before) == 48, "layout changed");
static_assert(offsetof(fold_attn_problem_t, window_after) == 52, "layout changed");
static_assert(offsetof(fold_attn_problem_t, sinks) == 56, "layout changed");

#define FOLD_STR2(x) #x
#define FOLD_STR(x) FOLD_STR2(x)

extern "C" {

const char *fold_version(void) {
  return FOLD_STR(FOLD_ATTENTION_VERSION_MAJOR) "." FOLD_STR(
      FOLD_ATTENTION_VERSION_MINOR) "." FOLD_STR(FOLD_ATTENTION_VERSION_PATCH);
}

int fold_built_with_cuda(void) {
#if defined(FOLD_WITH_CUDA)
  return 1;
#else
  return 0;
#endif
}

fold_status_t fold_check_problem(const fold_attn_problem_t *p, int host_cu_seqlens) {
  return fold::guarded("fold_check_problem", [&] { fold::check_problem(p, host_cu_seqlens != 0); });
}

}  // extern "C"
