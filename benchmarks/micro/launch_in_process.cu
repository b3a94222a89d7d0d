// The host cost of a launch from a shared library loaded into a process that already runs
// torch's CUDA runtime (notes/training_kernels.md, session 46): the library's C calls spend
// 16-28 µs per runtime call there (launch, memset) where a plain C++ process launches in ~4.2 µs
// (launch_cost.cu). The library links the CUDA runtime statically (a second runtime instance
// beside torch's libcudart); this file is built twice, with the static and with the shared
// runtime, and scripts/launch_in_process.py times both from one torch process.
//   nvcc -O3 -std=c++17 -arch=sm_90a -Xcompiler -fPIC -shared -cudart static \
//        -o launch_static.so benchmarks/micro/launch_in_process.cu
//   (the same with -cudart shared -o launch_shared.so)
#include <cuda_runtime.h>

#include <chrono>

namespace {
struct alignas(64) Map {  // a CUtensorMap's size and alignment
  unsigned char b[128];
};
struct Bytes {
  unsigned char b[320];
};
__global__ void __launch_bounds__(384, 1)
    smem_kernel(const __grid_constant__ Map a, const __grid_constant__ Map b,
                const __grid_constant__ Map c, const Bytes p) {
  extern __shared__ unsigned char smem[];
  if (a.b[0] + b.b[0] + c.b[0] + p.b[0] == 1024 && threadIdx.x == 1024) smem[0] = 1;
}
__global__ void empty_kernel() {}
}  // namespace

// Host µs per launch over n launches on `stream` (0: the legacy default stream), then a stream
// sync (not timed). kind 0: an empty 1 x 32 kernel; 1: the forward's shape (three maps, 320 B,
// 132 x 384, 200 KB of dynamic shared memory); 2: cudaMemsetAsync of 256 bytes; returns < 0 on a
// CUDA error.
extern "C" double launch_us(int kind, int n, void *stream, void *scratch) {
  const auto s = static_cast<cudaStream_t>(stream);
  constexpr int kSmem = 200 * 1024;
  if (cudaFuncSetAttribute(smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem) !=
      cudaSuccess)
    return -1.0;
  const Map m{};
  const Bytes p{};
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    if (kind == 0)
      empty_kernel<<<1, 32, 0, s>>>();
    else if (kind == 1)
      smem_kernel<<<132, 384, kSmem, s>>>(m, m, m, p);
    else
      cudaMemsetAsync(scratch, 0, 256, s);
  }
  const auto t1 = std::chrono::steady_clock::now();
  if (cudaStreamSynchronize(s) != cudaSuccess || cudaGetLastError() != cudaSuccess) return -2.0;
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / n;
}
