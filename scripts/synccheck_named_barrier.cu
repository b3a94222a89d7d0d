// A reduced kernel for the synccheck report on the forward's D 64 three-consumer kernel
// ("Barrier error detected. Divergent thread(s) in block" at zero_v_tail's `bar.sync 1, 384`;
// notes/training_kernels.md, sessions 28-30). It keeps that kernel's shape and nothing else:
// 512 threads = a producer warpgroup whose threads but one return at once (as forward_v12_kernel's
// do when no scan runs), and NC consumer warpgroups that wait on an mbarrier the producer thread
// arrives on, zero a share of shared memory with a stride of NC x 128 threads (a loop some lanes
// run once more than others), fence, and meet at a named barrier of NC x 128 threads.
//
// Variants (argv[1]), each a separate launch so that synccheck's report names it:
//   exit3   producer threads 1-127 return early, three consumers (the reported shape)
//   stay3   the same, but the producer threads stay until the end (no early exit)
//   exit2   two consumers (256-thread barrier, 384-thread block: the shape that is clean)
//   even3   exit3 with a zeroing loop every lane runs equally often (no loop divergence)
//   pcs3    exit3, but the third consumer reaches the named barrier through its own copy of the
//           zeroing and barrier code (another instruction: as the forward's trimmed kIdle form,
//           whose consumer runs another instantiation of run_tile than the busy ones)
//   pcs3na  pcs3 with the non-aligned barrier.sync (defined for threads reaching it from
//           different instructions; bar.sync is barrier.sync.aligned)
// Build: nvcc -arch=sm_90a -O3 -o synccheck_named_barrier scripts/synccheck_named_barrier.cu
// Run:   compute-sanitizer --tool synccheck ./synccheck_named_barrier exit3   (and the others)
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace {

__device__ __forceinline__ uint32_t smem_u32(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ bool try_wait(uint64_t *bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      " selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(smem_u32(bar)), "r"(parity)
      : "memory");
  return done != 0;
}

template <bool kAligned>
__device__ __forceinline__ void named_sync(int id, int threads) {
  if (kAligned)
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
  else
    asm volatile("barrier.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// The V tail's zeroing (rows valid .. 127 of 128-byte rows, 16-byte chunks, stride count), the
// fence and the named barrier; kCopy only makes the compiler emit a separate copy of the code.
template <int kCopy, bool kAligned>
__device__ __noinline__ void tail(unsigned char *stage, int valid, int first, int count,
                                  int chunks) {
  for (int idx = first; idx < chunks; idx += count)
    *reinterpret_cast<uint4 *>(stage + (valid * 128 + idx * 16 + kCopy * 0) % (128 * 128)) =
        make_uint4(0, 0, 0, 0);
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  named_sync<kAligned>(1, count);
}

template <int NC, bool kExit, bool kEven, bool kPcs = false, bool kAligned = true>
__global__ void __launch_bounds__((NC + 1) * 128, 1) reduced(int valid, int *out) {
  __shared__ __align__(16) unsigned char stage[128 * 128];
  __shared__ __align__(8) uint64_t full;
  constexpr int kC = NC * 128;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(&full)), "r"(1));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x < 128) {  // producer warpgroup
    if (threadIdx.x == 0) {
      for (int i = 0; i < 128 * 128; i += 16)
        *reinterpret_cast<uint4 *>(stage + i) = make_uint4(1, 2, 3, 4);
      asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(&full))
                   : "memory");
    }
    if (kExit) return;
    // (stay: wait here for the consumers' barrier to have been passed, then leave)
    asm volatile("bar.sync 2, %0;\n" ::"r"(kC + 128) : "memory");
    return;
  }
  const int t = static_cast<int>(threadIdx.x) - 128;
  while (!try_wait(&full, 0)) {
  }
  // The V tail's zeroing: rows valid .. 127 of 128-byte rows, 16-byte chunks, stride kC.
  const int chunks = kEven ? kC * 2 : (128 - valid) * 8;
  if constexpr (kPcs) {
    if (t >= 256)
      tail<1, kAligned>(stage, valid, t, kC, chunks);
    else
      tail<0, kAligned>(stage, valid, t, kC, chunks);
  } else {
    for (int idx = t; idx < chunks; idx += kC)
      *reinterpret_cast<uint4 *>(stage + (valid * 128 + idx * 16) % (128 * 128)) =
          make_uint4(0, 0, 0, 0);
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    asm volatile("bar.sync 1, %0;\n" ::"r"(kC) : "memory");
  }
  if (t == 0) *out = stage[valid * 128];
  if (!kExit) asm volatile("bar.sync 2, %0;\n" ::"r"(kC + 128) : "memory");
}

}  // namespace

int main(int argc, char **argv) {
  const char *v = argc > 1 ? argv[1] : "exit3";
  int *out = nullptr;
  cudaMalloc(&out, sizeof(int));
  // valid = 83: (128 - 83) * 8 = 360 chunks over 384 threads, so lanes 0-7 of the third
  // consumer's last warp run the loop once and lanes 8-31 do not (the loop diverges there).
  const int valid = 83;
  if (!std::strcmp(v, "exit3"))
    reduced<3, true, false><<<4, 512>>>(valid, out);
  else if (!std::strcmp(v, "stay3"))
    reduced<3, false, false><<<4, 512>>>(valid, out);
  else if (!std::strcmp(v, "exit2"))
    reduced<2, true, false><<<4, 384>>>(valid, out);
  else if (!std::strcmp(v, "even3"))
    reduced<3, true, true><<<4, 512>>>(valid, out);
  else if (!std::strcmp(v, "pcs3"))
    reduced<3, true, false, true, true><<<4, 512>>>(valid, out);
  else if (!std::strcmp(v, "pcs3na"))
    reduced<3, true, false, true, false><<<4, 512>>>(valid, out);
  else {
    std::printf("unknown variant %s\n", v);
    return 2;
  }
  const cudaError_t e = cudaDeviceSynchronize();
  std::printf("%s: %s\n", v, cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
