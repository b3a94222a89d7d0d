// See launch_setup.h.
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "core/status.h"
#include "cuda/launch_setup.h"

namespace fold::cuda {

namespace {

void check(cudaError_t err, const char *what) {
  if (err != cudaSuccess) fail(FOLD_ERR_CUDA, std::string(what) + ": " + cudaGetErrorString(err));
}

int current_device() {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  return device;
}

}  // namespace

void set_max_dynamic_smem(const void *kernel, int bytes, const char *what) {
  const int device = current_device();
  static std::mutex mutex;
  static std::map<std::pair<const void *, int>, int> granted;  // (kernel, device) -> bytes
  const std::lock_guard<std::mutex> lock(mutex);
  int &have = granted[{kernel, device}];
  if (have >= bytes) return;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
        (std::string("cudaFuncSetAttribute(") + what + ")").c_str());
  have = bytes;
}

int sm_count() {
  const int device = current_device();
  static std::mutex mutex;
  static std::map<int, int> counts;  // device -> multiprocessors
  const std::lock_guard<std::mutex> lock(mutex);
  int &n = counts[device];
  if (n == 0) {
    check(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device),
          "cudaDeviceGetAttribute(multiProcessorCount)");
    if (n <= 0) n = 1;
  }
  return n;
}

double dram_bytes_per_second() {
  const int device = current_device();
  static std::mutex mutex;
  static std::map<int, double> rates;  // device -> bytes per second
  const std::lock_guard<std::mutex> lock(mutex);
  const auto found = rates.find(device);
  if (found != rates.end()) return found->second;
  // A scheduling hint, not a requirement: a device that does not report these gives 0
  // (unknown), and the failed query leaves no error behind for the next launch.
  int khz = 0, bits = 0;
  const bool known =
      cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, device) == cudaSuccess &&
      cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, device) == cudaSuccess;
  if (!known) (void)cudaGetLastError();
  // Double data rate: two transfers per clock.
  const double rate = known && khz > 0 && bits > 0 ? 2.0 * khz * 1e3 * bits / 8.0 : 0.0;
  rates.emplace(device, rate);
  return rate;
}

int resident_blocks(const void *kernel, int threads, size_t smem) {
  const int device = current_device();
  static std::mutex mutex;
  static std::map<std::tuple<const void *, int, size_t, int>, int> blocks;
  const std::lock_guard<std::mutex> lock(mutex);
  int &n = blocks[{kernel, threads, smem, device}];
  if (n == 0) {
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem),
          "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    if (n <= 0) n = 1;
  }
  return n;
}

}  // namespace fold::cuda
