// A minimal parallel-for over independent work items for the CPU reference.
//
// Invariant: work items never share outputs, so results do not depend on the number of
// threads or on scheduling; threads only change how fast the reference runs.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace fold::cpu {

inline int reference_threads() {
  if (const char *env = std::getenv("FOLD_CPU_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(std::min(hw, 64u));
}

template <class F>
void parallel_for(int64_t n, F &&fn) {
  const int threads = static_cast<int>(std::min<int64_t>(reference_threads(), n));
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&]() {
    for (int64_t i = next++; i < n; i = next++) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto &t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace fold::cpu
