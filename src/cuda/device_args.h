// The C entry points' check that their device arguments can be used by the kernels they are
// about to launch on the current device. A pointer the CUDA runtime does not know (pageable
// host memory) or memory of another GPU would make the kernels fault (a sticky CUDA error that
// ends the process's context) or, with peer access on, read across GPUs; a stream of another
// device would fail at the launch. Each is refused by name instead (FOLD_ERR_INVALID_ARGUMENT).
#pragma once

#include <cstddef>
#include <initializer_list>

namespace fold::cuda {

struct DeviceArg {
  const char *name;
  const void *ptr;  // null: not given (the caller checks what is required)
};

// Throws unless every non-null pointer is device memory of the current device, managed memory
// or host memory registered or mapped for the device, and unless `stream` is the legacy /
// per-thread default stream or a stream of the current device. Pageable host memory is refused
// even where the device could read it (HMM, Grace Hopper's ATS): the entry points take device
// pointers (fold_attention.h), and the kernels' tensor maps are not made for it. One runtime
// query per pointer (cudaPointerGetAttributes).
void check_device_args(const DeviceArg *args, size_t n, void *stream);
inline void check_device_args(std::initializer_list<DeviceArg> args, void *stream) {
  check_device_args(args.begin(), args.size(), stream);
}

}  // namespace fold::cuda
