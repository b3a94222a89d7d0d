// The eager decode step's host checks in one device read (fold_decode_cuda_precheck): the
// requests' lengths and whether q, or the k / v rows of an active request, hold a non-finite
// value (bits 1, 2, 4), or k a key large enough that its rotation might overflow (bit 8).
//
// Why: fold_attn_with_kvcache checked these with two reads of the device before every eager
// step, the lengths (.tolist()) and the finiteness of q, k and v (torch.cat, isfinite, all, and
// the read): 11.5 + 77.2 us of host time of a 178 us batch-1 step on the H200 (notes/decode.md
// section 28). Here one kernel writes both into mapped pinned memory and the host waits once.
//
// One thread per 16-bit element, grid-stride; a value is non-finite when its exponent bits are
// all ones (bf16 0x7f80, fp16 0x7c00). Each block ORs its findings into a device word; the last
// block to finish (a ticket, after a fence) moves that word and the lengths to the host buffer
// and resets the word and the ticket for the next call. The device words and the host buffer
// are shared by every call on a device, so a call holds a mutex from the launch to the end of
// its wait.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "core/status.h"
#include "cuda/launch.h"

namespace fold::cuda {

namespace {

void check(cudaError_t err, const char *what) {
  if (err != cudaSuccess) fail(FOLD_ERR_CUDA, std::string(what) + ": " + cudaGetErrorString(err));
}

constexpr int kPrecheckThreads = 256;
constexpr int kPrecheckMaxBlocks = 264;

__device__ int32_t g_precheck_bits;     // the blocks' findings (reset by the last block)
__device__ uint32_t g_precheck_ticket;  // blocks done (reset by the last block)

// Rows of a (batch, heads, D) view, element e = (b, h, d); `active`: only rows of requests with
// a length >= 0.
struct Rows {
  const uint16_t *data;
  int64_t batch_stride, head_stride;
  int64_t count;  // batch x heads x D, 0 when absent
  int heads;
};

// Element e's finding: 1 if it is non-finite, 2 if its magnitude bits are >= `large` (a key whose
// Hadamard rotation might overflow float32: the host then runs the exact test), else 0.
__device__ __forceinline__ int finding_at(const Rows &r, int64_t e, int D, uint16_t exp_mask,
                                          uint16_t large, const int32_t *lengths,
                                          bool active_only) {
  const int64_t per_b = static_cast<int64_t>(r.heads) * D;
  const int64_t b = e / per_b, rem = e - b * per_b;
  const int64_t h = rem / D, d = rem - h * D;
  if (active_only && lengths[b] < 0) return 0;
  const uint16_t x = r.data[b * r.batch_stride + h * r.head_stride + d];
  if ((x & exp_mask) == exp_mask) return 1;
  return (x & 0x7fffu) >= large ? 2 : 0;
}

__global__ void __launch_bounds__(kPrecheckThreads)
    decode_precheck_kernel(const int32_t *lengths, int batch, int D, uint16_t exp_mask,
                           uint16_t large, Rows q, Rows k, Rows v, int32_t *host_out) {
  __shared__ int32_t s_bits;
  __shared__ bool s_last;
  if (threadIdx.x == 0) s_bits = 0;
  __syncthreads();
  int32_t bits = 0;
  const int64_t total = q.count + k.count + v.count;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += stride) {
    if (e < q.count) {
      if (finding_at(q, e, D, exp_mask, 0xffffu, lengths, false) == 1) bits |= 1;
    } else if (e < q.count + k.count) {
      const int f = finding_at(k, e - q.count, D, exp_mask, large, lengths, true);
      if (f != 0) bits |= f == 1 ? 2 : 8;
    } else if (finding_at(v, e - q.count - k.count, D, exp_mask, 0xffffu, lengths, true) == 1) {
      bits |= 4;
    }
  }
  if (bits != 0) atomicOr(&s_bits, bits);
  __syncthreads();
  if (threadIdx.x == 0) {
    if (s_bits != 0) atomicOr(&g_precheck_bits, s_bits);
    __threadfence();  // this block's findings before its ticket
    s_last = atomicAdd(&g_precheck_ticket, 1u) == gridDim.x - 1;
    if (s_last) __threadfence();  // the other blocks' findings before this block reads them
  }
  __syncthreads();
  if (!s_last) return;
  // The last block: every other block's findings are in (their fences precede their tickets).
  for (int b = threadIdx.x; b < batch; b += blockDim.x) host_out[1 + b] = lengths[b];
  if (threadIdx.x == 0) {
    host_out[0] = atomicExch(&g_precheck_bits, 0);
    g_precheck_ticket = 0u;
  }
}

Rows rows_of(fold_tensor_t t, int batch, int heads, int D) {
  Rows r{static_cast<const uint16_t *>(t.data), t.batch_stride, t.head_stride, 0, heads};
  if (t.data != nullptr) r.count = static_cast<int64_t>(batch) * heads * D;
  return r;
}

// The mapped pinned buffer of a device: [0] the findings, [1 .. batch] the lengths.
struct HostBuffer {
  int32_t *host = nullptr, *dev = nullptr;
  int capacity = 0;  // ints
};
std::mutex g_mutex;
std::map<int, HostBuffer> g_buffers;

}  // namespace

void launch_decode_precheck(const fold_kvcache_t &c, int n_heads, fold_tensor_t q,
                            fold_tensor_t k_step, fold_tensor_t v_step, int32_t *lengths_out,
                            int32_t *nonfinite, void *stream) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  HostBuffer &buf = g_buffers[device];
  if (buf.capacity < c.batch + 1) {
    if (buf.host != nullptr) check(cudaFreeHost(buf.host), "cudaFreeHost");
    buf = HostBuffer{};
    void *p = nullptr;
    check(
        cudaHostAlloc(&p, static_cast<size_t>(c.batch + 1) * sizeof(int32_t), cudaHostAllocMapped),
        "cudaHostAlloc (decode precheck)");
    buf.host = static_cast<int32_t *>(p);
    void *d = nullptr;
    check(cudaHostGetDevicePointer(&d, p, 0), "cudaHostGetDevicePointer (decode precheck)");
    buf.dev = static_cast<int32_t *>(d);
    buf.capacity = c.batch + 1;
  }
  const int D = c.head_dim;
  const Rows rq = rows_of(q, c.batch, n_heads, D);
  const Rows rk = rows_of(k_step, c.batch, c.n_kv_heads, D);
  const Rows rv = rows_of(v_step, c.batch, c.n_kv_heads, D);
  const int64_t total = rq.count + rk.count + rv.count;
  const int blocks = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>(kPrecheckMaxBlocks, (total + kPrecheckThreads - 1) / kPrecheckThreads)));
  const uint16_t exp_mask = c.dtype == FOLD_DTYPE_F16 ? 0x7c00 : 0x7f80;
  // The cache writers sum D keys' values per rotated element in float32: only |k| >=
  // 2^(127 - log2 D) can overflow (bf16 bits >= (254 - log2 D) << 7; fp16 never can).
  int log2d = 0;
  while ((1 << log2d) < D) ++log2d;
  const uint16_t large =
      c.dtype == FOLD_DTYPE_F16 ? 0xffffu : static_cast<uint16_t>((254 - log2d) << 7);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(s, &capturing), "cudaStreamIsCapturing");
  if (capturing != cudaStreamCaptureStatusNone)
    fail(FOLD_ERR_INVALID_ARGUMENT,
         "fold_decode_cuda_precheck waits for its stream: it cannot be captured in a CUDA graph");
  // A marker the kernel's last block overwrites: a call whose kernel did not run to the end
  // reports an error instead of the previous call's values.
  buf.host[0] = -1;
  decode_precheck_kernel<<<blocks, kPrecheckThreads, 0, s>>>(c.lengths, c.batch, D, exp_mask, large,
                                                             rq, rk, rv, buf.dev);
  // Wait before reporting a launch error: the device words are shared by the next call, which
  // must not overlap a kernel of this one.
  const cudaError_t launched = cudaGetLastError();
  const cudaError_t waited = cudaStreamSynchronize(s);
  check(launched, "decode_precheck_kernel launch");
  check(waited, "decode precheck (stream synchronize)");
  if (buf.host[0] < 0) fail(FOLD_ERR_CUDA, "decode precheck: the kernel reported nothing");
  *nonfinite = buf.host[0];
  std::memcpy(lengths_out, buf.host + 1, static_cast<size_t>(c.batch) * sizeof(int32_t));
}

}  // namespace fold::cuda
