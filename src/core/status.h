// Errors inside the library are C++ exceptions carrying a fold_status_t; each C entry
// point converts them to a status code plus a thread-local message (fold_last_error).
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include "fold_attention/fold_attention.h"

namespace fold {

class Error : public std::runtime_error {
 public:
  Error(fold_status_t status, const std::string &message)
      : std::runtime_error(message), status_(status) {}
  fold_status_t status() const { return status_; }

 private:
  fold_status_t status_;
};

[[noreturn]] inline void fail(const std::string &message) {
  throw Error(FOLD_ERR_INVALID_ARGUMENT, message);
}
[[noreturn]] inline void fail(fold_status_t status, const std::string &message) {
  throw Error(status, message);
}

void set_last_error(const std::string &message);

// Runs f, mapping any exception to a status and "<entry>: <message>".
template <class F>
fold_status_t guarded(const char *entry, F &&f) {
  try {
    std::forward<F>(f)();
    set_last_error("");
    return FOLD_OK;
  } catch (const Error &e) {
    set_last_error(std::string(entry) + ": " + e.what());
    return e.status();
  } catch (const std::bad_alloc &) {
    set_last_error(std::string(entry) + ": out of host memory");
    return FOLD_ERR_INTERNAL;
  } catch (const std::exception &e) {
    set_last_error(std::string(entry) + ": internal error: " + e.what());
    return FOLD_ERR_INTERNAL;
  }
}

}  // namespace fold
