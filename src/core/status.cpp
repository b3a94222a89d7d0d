#include "core/status.h"

namespace fold {

namespace {
thread_local std::string g_last_error;
}

void set_last_error(const std::string &message) { g_last_error = message; }

}  // namespace fold

extern "C" const char *fold_last_error(void) { return fold::g_last_error.c_str(); }
