// What one kernel launch costs the host, by the launch's shape (notes/training_kernels.md, session
// 46). The training forward's C call spends ~24-28 µs in its one cudaLaunchKernel on the H100
// host where a torch elementwise launch takes ~11 µs (torch.profiler with CUPTI). The forward's
// launch differs from torch's by its parameters (three 128-byte tensor maps as
// __grid_constant__ parameters and ~300 bytes of structs), its dynamic shared memory (~200 KB,
// raised once by cudaFuncSetAttribute) and its 384-thread blocks. Each case below is an empty
// kernel launched kLaunches times back to back; the figure is host µs per launch (median of
// kReps rounds; the device drains between rounds).
//   nvcc -O3 -std=c++17 -arch=sm_90a -o launch_cost benchmarks/micro/launch_cost.cu
//   ./launch_cost
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "cuda_check.h"

namespace {

constexpr int kLaunches = 2000;
constexpr int kReps = 7;

template <int N>
struct Bytes {
  unsigned char b[N];
};
struct alignas(64) Map {  // a CUtensorMap's size and alignment
  unsigned char b[128];
};

__global__ void empty_kernel() {}

template <int N>
__global__ void params_kernel(const Bytes<N> p) {
  if (p.b[0] == 255 && threadIdx.x == 1024) printf("never\n");
}

__global__ void maps_kernel(const __grid_constant__ Map a, const __grid_constant__ Map b,
                            const __grid_constant__ Map c, const Bytes<320> p) {
  if (a.b[0] + b.b[0] + c.b[0] + p.b[0] == 1024 && threadIdx.x == 1024) printf("never\n");
}

__global__ void __launch_bounds__(384, 1)
    smem_kernel(const __grid_constant__ Map a, const __grid_constant__ Map b,
                const __grid_constant__ Map c, const Bytes<320> p) {
  extern __shared__ unsigned char smem[];
  if (a.b[0] + b.b[0] + c.b[0] + p.b[0] == 1024 && threadIdx.x == 1024) smem[0] = 1;
}

double host_us_per_launch(const std::function<void()> &launch) {
  for (int i = 0; i < 50; ++i) launch();
  CK(cudaDeviceSynchronize());
  std::vector<double> t;
  for (int r = 0; r < kReps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kLaunches; ++i) launch();
    const auto t1 = std::chrono::steady_clock::now();
    CK(cudaDeviceSynchronize());
    t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / kLaunches);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main() {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const Map m{};
  const Bytes<320> p320{};
  const Bytes<256> p256{};
  const Bytes<1024> p1k{};
  const Bytes<4000> p4k{};
  constexpr int kSmem = 200 * 1024;
  CK(cudaFuncSetAttribute(smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  struct Case {
    const char *name;
    std::function<void()> launch;
  };
  const std::vector<Case> cases = {
      {"empty, 1 x 32", [&] { empty_kernel<<<1, 32, 0, s>>>(); }},
      {"empty, 132 x 384", [&] { empty_kernel<<<132, 384, 0, s>>>(); }},
      {"256 B of parameters", [&] { params_kernel<256><<<132, 384, 0, s>>>(p256); }},
      {"1 KB of parameters", [&] { params_kernel<1024><<<132, 384, 0, s>>>(p1k); }},
      {"4000 B of parameters", [&] { params_kernel<4000><<<132, 384, 0, s>>>(p4k); }},
      {"3 grid-constant maps + 320 B", [&] { maps_kernel<<<132, 384, 0, s>>>(m, m, m, p320); }},
      {"the same, 200 KB dynamic smem",
       [&] { smem_kernel<<<132, 384, kSmem, s>>>(m, m, m, p320); }},
      {"the same, 1 KB dynamic smem", [&] { smem_kernel<<<132, 384, 1024, s>>>(m, m, m, p320); }},
      {"the same, PDL (cudaLaunchKernelEx)",
       [&] {
         cudaLaunchConfig_t cfg{};
         cfg.gridDim = 132;
         cfg.blockDim = 384;
         cfg.dynamicSmemBytes = kSmem;
         cfg.stream = s;
         cudaLaunchAttribute at{};
         at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
         at.val.programmaticStreamSerializationAllowed = 1;
         cfg.attrs = &at;
         cfg.numAttrs = 1;
         CK(cudaLaunchKernelEx(&cfg, smem_kernel, m, m, m, p320));
       }},
  };
  std::printf("host µs per launch (median of %d rounds of %d launches)\n", kReps, kLaunches);
  for (const Case &c : cases) std::printf("  %-40s %7.2f\n", c.name, host_us_per_launch(c.launch));
  CK(cudaStreamDestroy(s));
  return 0;
}
