// Tensor Memory Accelerator (TMA) and bulk asynchronous copies, sm_90.
//
// Tensor loads (cp.async.bulk.tensor): one thread issues a copy of a whole box (described
// by a CUtensorMap built on the host, tensor_map.h) from global to shared memory; the bytes
// complete on an mbarrier (mbarrier.cuh: arrive_expect_tx with the box's full byte count,
// out-of-bounds elements included, which TMA fills with zeros). Coordinates are signed
// 32-bit element indices, innermost dimension first. The tensor map must live in
// const/param/global memory: pass it as a `const __grid_constant__ CUtensorMap` kernel
// parameter (by value, which also keeps CUDA graph capture working) and give its generic
// address here. Shared destinations must be 128-byte aligned, 1024-byte aligned for the
// 128B swizzle (the swizzle pattern is computed from address bits [4, 10)).
//
// Tensor reduce (cp.reduce.async.bulk.tensor): the reverse direction, a shared tile added
// into the box of a tensor map element-wise, atomically per element (relaxed, gpu scope),
// e.g. an int32 tile of dQ partials into the integer dQ grid. Completion is tracked by bulk
// async-groups of the issuing thread: commit, then wait_read (the shared source may be
// overwritten) or wait (writes done). Generic-proxy writes to the shared source must be
// made visible to the async proxy first (fence_proxy_async, executed by the writing
// threads, then a barrier to the issuer).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/hopper/mbarrier.cuh"

namespace fold::cuda::hopper {

__device__ __forceinline__ uint64_t tmap_addr(const CUtensorMap *map) {
  return reinterpret_cast<uint64_t>(map);
}

// Brings the descriptor into the TMA unit's cache ahead of the first copy.
__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap *map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(tmap_addr(map)) : "memory");
}

__device__ __forceinline__ void tma_load_2d(void *dst, const CUtensorMap *map, uint64_t *bar,
                                            int32_t c0, int32_t c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];\n" ::"r"(smem_u32(dst)),
      "l"(tmap_addr(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1)
      : "memory");
}

__device__ __forceinline__ void tma_load_3d(void *dst, const CUtensorMap *map, uint64_t *bar,
                                            int32_t c0, int32_t c1, int32_t c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(smem_u32(dst)),
      "l"(tmap_addr(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

__device__ __forceinline__ void tma_load_4d(void *dst, const CUtensorMap *map, uint64_t *bar,
                                            int32_t c0, int32_t c1, int32_t c2, int32_t c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(smem_u32(dst)),
      "l"(tmap_addr(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

// Makes this thread's generic-proxy shared-memory writes visible to the async proxy
// (TMA, bulk copies and wgmma operand reads).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Tensor reduce-add (cp.reduce.async.bulk.tensor, tile mode): the box at coordinates (c0, c1,
// c2) of `map` += the shared tile at src (laid out as a tensor load would write it, swizzle
// included), element-wise and atomically per element, in the map's element type; elements
// outside the tensor are dropped. One thread issues it; completion by bulk async-groups as
// above (src 128-byte aligned, 1024 for the 128B swizzle).
__device__ __forceinline__ void tma_reduce_add_3d(const CUtensorMap *map, const void *src,
                                                  int32_t c0, int32_t c1, int32_t c2) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group"
      " [%0, {%2, %3, %4}], [%1];\n" ::"l"(tmap_addr(map)),
      "r"(smem_u32(src)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// At most kPending of this thread's bulk groups still read their shared sources.
template <int kPending>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}
// At most kPending of this thread's bulk groups are incomplete (global writes included).
template <int kPending>
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace fold::cuda::hopper
