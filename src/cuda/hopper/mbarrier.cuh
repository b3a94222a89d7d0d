// Shared-memory transaction barriers (mbarrier, sm_90): the handshake between TMA loads
// (which complete "transaction bytes" on a barrier) and the threads that consume them, and
// between consumers releasing a pipeline stage and the producer refilling it.
//
// A barrier (8 bytes of shared memory, 8-byte aligned) counts arrivals and pending
// transaction bytes; a phase completes when `count` arrivals have happened and the byte
// count is back to 0; then the next phase starts with the same expected count. Waiters name
// the phase by its parity (0, 1, 0, ...): wait(bar, parity) returns once the phase of that
// parity has completed. Pipeline convention used by the kernels: stage s, use u = j / stages
// of it (j counts the blocks):
//   full[s]:  producer arrive_expect_tx(bytes) + TMA(complete_tx); consumers wait parity u & 1.
//   empty[s]: consumers arrive after their last read of the stage; the producer, before
//             refilling the stage for use u >= 1, waits parity (u - 1) & 1.
#pragma once

#include <cstdint>

namespace fold::cuda::hopper {

__device__ __forceinline__ uint32_t smem_u32(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// One thread initialises; make it visible (fence_barrier_init + a CTA barrier) before use.
__device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count)
               : "memory");
}
// Orders the initialisations before later uses by the async proxy (TMA complete_tx).
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One arrival, and `bytes` more transaction bytes expected in the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t *bar, uint32_t bytes) {
  asm volatile(
      "mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)),
      "r"(bytes)
      : "memory");
}

// One arrival (release semantics: this thread's earlier shared-memory accesses, including
// reads finished by a completed wgmma wait, happen before the phase completes).
__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar))
               : "memory");
}

// Non-blocking probe: true once the phase with this parity has completed.
__device__ __forceinline__ bool mbar_try_wait(uint64_t *bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(smem_u32(bar)), "r"(parity)
      : "memory");
  return done != 0;
}

// Blocks (try_wait suspends the thread for a hardware time slice per probe) until the phase
// with this parity has completed; acquire semantics (the TMA's bytes are visible after it).
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

}  // namespace fold::cuda::hopper
