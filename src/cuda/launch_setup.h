// Per-device launch setup the launchers share: the dynamic shared memory opt-in and the
// multiprocessor count. Each is done or queried once per device (and kernel), so that a
// call captured in a CUDA graph later repeats no host work.
#pragma once

#include <cstddef>

namespace fold::cuda {

// Raises `kernel`'s dynamic shared memory limit on the current device to at least `bytes`
// (above 48 KB a kernel must opt in); `what` names the kernel in an error (FOLD_ERR_CUDA).
// Thread-safe.
void set_max_dynamic_smem(const void *kernel, int bytes, const char *what);

// Streaming multiprocessors of the current device (>= 1).
int sm_count();

// Peak DRAM bandwidth of the current device in bytes per second (twice the memory clock times
// the bus width), or 0 (unknown) when the device does not report them. Queried once per device;
// never fails.
double dram_bytes_per_second();

// Blocks of `kernel` resident at once on one multiprocessor of the current device with
// `threads` threads and `smem` bytes of dynamic shared memory (>= 1; the occupancy calculator,
// queried once per kernel, size and device). Call after set_max_dynamic_smem. Thread-safe.
int resident_blocks(const void *kernel, int threads, size_t smem);

}  // namespace fold::cuda
