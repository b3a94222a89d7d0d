// Host µs per call of the library's training forward entry points from C (no Python, no ctypes),
// against what the package's ctypes calls take (scripts/host_breakdown.py: 21-47 µs per
// fold_fwd_cuda on the H100 hosts; notes/training_kernels.md, session 46). A call launches one
// kernel (~4 µs: benchmarks/micro/launch_cost.cu); the rest is the library's host work.
// Cases: fold_check_problem alone (the host validation), fold_fwd_cuda, fold_fwd_cuda_kv_bounds
// (a memset and the launch), at (1, 128, 8/8, 64) bf16 causal: the GPU finishes each call's
// kernel in a few µs, so the launch queue never fills (a sync every 20 calls, untimed).
//   nvcc -O3 -std=c++17 -arch=sm_90a -Iinclude -o fwd_call_host benchmarks/micro/fwd_call_host.cu
//   -ldl
//   ./fwd_call_host path/to/libfold_attention.so
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "fold_attention/fold_attention.h"

namespace {

constexpr int kCalls = 400, kBetweenSyncs = 20, kReps = 7;

double host_us(const std::function<int()> &call) {
  std::vector<double> t;
  for (int r = 0; r < kReps + 1; ++r) {
    double spent = 0.0;
    for (int i = 0; i < kCalls; i += kBetweenSyncs) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int j = 0; j < kBetweenSyncs; ++j)
        if (call() != FOLD_OK) {
          std::fprintf(stderr, "call failed\n");
          std::exit(1);
        }
      spent +=
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      cudaDeviceSynchronize();
    }
    if (r > 0) t.push_back(spent / kCalls);  // (round 0: warm-up, module loading)
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

template <class F>
F symbol(void *lib, const char *name) {
  void *p = dlsym(lib, name);
  if (p == nullptr) {
    std::fprintf(stderr, "%s: not found\n", name);
    std::exit(1);
  }
  return reinterpret_cast<F>(p);
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s libfold_attention.so\n", argv[0]);
    return 2;
  }
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  using Check = fold_status_t (*)(const fold_attn_problem_t *, int);
  using Fwd = fold_status_t (*)(const fold_attn_problem_t *, fold_tensor_t, fold_tensor_t,
                                fold_tensor_t, fold_tensor_t, float *, void *);
  using FwdB = fold_status_t (*)(const fold_attn_problem_t *, fold_tensor_t, fold_tensor_t,
                                 fold_tensor_t, fold_tensor_t, float *, float *, void *);
  const auto check = symbol<Check>(lib, "fold_check_problem");
  const auto fwd = symbol<Fwd>(lib, "fold_fwd_cuda");
  const auto fwd_b = symbol<FwdB>(lib, "fold_fwd_cuda_kv_bounds");

  constexpr int B = 1, S = 128, H = 8, D = 64;
  fold_attn_problem_t p{};
  p.batch = B;
  p.seqlen = S;
  p.total_tokens = static_cast<int64_t>(B) * S;
  p.n_heads = H;
  p.n_kv_heads = H;
  p.head_dim = D;
  p.dtype = FOLD_DTYPE_BF16;
  p.causal = 1;
  p.softmax_scale = 0.125f;
  const size_t elems = static_cast<size_t>(B) * S * H * D;
  void *q, *k, *v, *o;
  float *lse, *bounds;
  cudaMalloc(&q, 2 * elems);
  cudaMalloc(&k, 2 * elems);
  cudaMalloc(&v, 2 * elems);
  cudaMalloc(&o, 2 * elems);
  cudaMalloc(&lse, sizeof(float) * B * S * H);
  cudaMalloc(&bounds, sizeof(float) * B * H * 4);
  cudaMemset(q, 0, 2 * elems);
  cudaMemset(k, 0, 2 * elems);
  cudaMemset(v, 0, 2 * elems);
  const auto t = [&](void *d) {
    return fold_tensor_t{d, static_cast<int64_t>(S) * H * D, static_cast<int64_t>(H) * D, D};
  };
  std::printf("host µs per call, (%d, %d, %d/%d, %d) bf16 causal, median of %d rounds of %d\n", B,
              S, H, H, D, kReps, kCalls);
  std::printf("  %-40s %7.2f\n", "fold_check_problem",
              host_us([&] { return static_cast<int>(check(&p, 0)); }));
  std::printf("  %-40s %7.2f\n", "fold_fwd_cuda", host_us([&] {
                return static_cast<int>(fwd(&p, t(q), t(k), t(v), t(o), lse, nullptr));
              }));
  std::printf("  %-40s %7.2f\n", "fold_fwd_cuda_kv_bounds", host_us([&] {
                return static_cast<int>(fwd_b(&p, t(q), t(k), t(v), t(o), lse, bounds, nullptr));
              }));
  return 0;
}
