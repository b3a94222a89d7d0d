// Library-level C entry points: version, build features, problem checks.
#include "core/status.h"
#include "core/validate.h"
#include "fold_attention/fold_attention.h"

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
