// See device_args.h. Host code only (the runtime's queries), in a .cu file so that a build
// without CUDA replaces it (no_cuda.cpp).
#include <cuda_runtime.h>

#include <string>

#include "core/status.h"
#include "cuda/device_args.h"

namespace fold::cuda {

namespace {

[[noreturn]] void cuda_fail(cudaError_t err, const std::string &what) {
  (void)cudaGetLastError();  // a failed query leaves no error behind for the next launch
  fail(FOLD_ERR_CUDA, what + ": " + cudaGetErrorString(err));
}

// The queries below record nothing into a graph, but stream capture's default global mode may
// count them as unsafe while another thread captures: the calling thread's mode is relaxed
// around them and restored on every exit.
class RelaxedCapture {
 public:
  RelaxedCapture() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCapture() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCapture(const RelaxedCapture &) = delete;
  RelaxedCapture &operator=(const RelaxedCapture &) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

}  // namespace

void check_device_args(const DeviceArg *args, size_t n, void *stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  // A stream being captured refuses cudaStreamGetDevice (measured: the capture is then
  // invalidated), and a capture only records the launch an eager call already ran with the
  // same arguments: checked there, not here.
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (const cudaError_t err = cudaStreamIsCapturing(s, &capturing); err != cudaSuccess)
    cuda_fail(err, "stream: cudaStreamIsCapturing");
  if (capturing != cudaStreamCaptureStatusNone) return;
  const RelaxedCapture relaxed;  // (another thread may be capturing)
  int device = 0;
  if (const cudaError_t err = cudaGetDevice(&device); err != cudaSuccess)
    cuda_fail(err, "cudaGetDevice");
  if (s != nullptr && s != cudaStreamLegacy && s != cudaStreamPerThread) {
    int owner = 0;
    if (const cudaError_t err = cudaStreamGetDevice(s, &owner); err != cudaSuccess)
      cuda_fail(err, "stream: cudaStreamGetDevice");
    if (owner != device)
      fail("stream belongs to device " + std::to_string(owner) + " but the current device is " +
           std::to_string(device) + " (make the data's device current: cudaSetDevice)");
  }
  for (size_t i = 0; i < n; ++i) {
    const DeviceArg &arg = args[i];
    if (arg.ptr == nullptr) continue;
    cudaPointerAttributes attr{};
    if (const cudaError_t err = cudaPointerGetAttributes(&attr, arg.ptr); err != cudaSuccess)
      cuda_fail(err, std::string(arg.name) + ": cudaPointerGetAttributes");
    if (attr.type == cudaMemoryTypeUnregistered)
      fail(std::string(arg.name) +
           " is not device memory (pageable host memory?): pass device memory");
    if (attr.type == cudaMemoryTypeDevice && attr.device != device)
      fail(std::string(arg.name) + " is memory of device " + std::to_string(attr.device) +
           " but the current device is " + std::to_string(device) +
           " (make the data's device current: cudaSetDevice)");
  }
}

}  // namespace fold::cuda
