// Backward preprocess on the GPU: Delta_i = dO_i . O_i per (token, head) and the
// per-(request, KV head) bounds of the integer grid (ALGORITHMS.md section 5).
//
// Bit-exactness with the CPU reference (cpu/bwd_preprocess.cpp):
//   - Delta and ||dO|| follow row_reduce.h: lane c of a W-lane segment owns chunk c
//     (one 16-byte load), accumulates it with __fmaf_rn in element order from +0.0f, then
//     a __shfl_xor butterfly with __fadd_rn combines lanes. No other arithmetic touches them.
//   - Bounds are maxima of canonicalised |x| bits (float_bits.h): order-free, so the block
//     reduction and the global atomicMax may run in any order.
// Memory-bound: it reads dO and O once (and K, V once, in blocks of their own, unless the
// training forward already took their maxima: kv_bounds.cuh) and writes Delta once; no
// shared-memory staging is needed. In the backward it also
// zeroes the dQ grid rows of each (token, query head) it reads: the grid's writes overlap the
// reads in one pass instead of a separate memset before or after it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "core/float_bits.h"
#include "core/problem.h"
#include "core/row_reduce.h"
#include "core/status.h"
#include "cuda/launch.h"

namespace fold::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kPasses = 4;     // row passes per block iteration, loads hoisted ahead
constexpr int kMinBlocks = 3;  // caps registers so 3 blocks (24 warps) fit per SM

struct Bf16Tag {};
struct F16Tag {};

// Eight consecutive 16-bit elements as floats (exact conversions).
__device__ __forceinline__ void unpack8(const uint4 raw, float (&x)[8], Bf16Tag) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    x[2 * i] = __uint_as_float(w[i] << 16);
    x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ void unpack8(const uint4 raw, float (&x)[8], F16Tag) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __half2 h = *reinterpret_cast<const __half2 *>(&w[i]);
    const float2 f = __half22float2(h);
    x[2 * i] = f.x;
    x[2 * i + 1] = f.y;
  }
}

__device__ __forceinline__ uint32_t block_max(uint32_t value, uint32_t *scratch) {
  value = __reduce_max_sync(0xffffffffu, value);
  if ((threadIdx.x & 31) == 0) atomicMax(scratch, value);
  return value;
}

// The rare path of ||dO_i|| (row_reduce.h's canonical_norm): the block's rows again, the plain
// sum of squares to tell which rows need the scaled one, and the scaled norm of those; returns
// the max of their norms' bits. Every lane runs every row, so the shuffles stay warp-uniform.
template <class Tag>
__device__ __noinline__ uint32_t scaled_norms_max(const char *row0, int64_t row_bytes, int64_t len,
                                                  int head_dim, int64_t first_row,
                                                  int64_t row_step) {
  // Kept out of line (scalars only, no struct by reference): the common path's kernel stays as
  // small as it was.
  const int D = head_dim;
  const int W = reduce_lanes(D);
  const int lane = threadIdx.x & 31;
  const int chunk = lane % W;
  const bool has_chunk = chunk * kChunk < D;
  const int rows_per_pass = kWarps * (32 / W);
  const int row_in_pass = (threadIdx.x >> 5) * (32 / W) + lane / W;
  uint32_t result = 0;
  for (int64_t base = first_row; base < len; base += row_step) {
    for (int s = 0; s < kPasses; ++s) {
      const int64_t i = base + s * rows_per_pass + row_in_pass;
      uint4 raw = make_uint4(0, 0, 0, 0);
      if (i < len && has_chunk)
        raw = *reinterpret_cast<const uint4 *>(row0 + i * row_bytes + chunk * kChunk * 2);
      float x[8];
      unpack8(raw, x, Tag{});
      float q = 0.0f;
      uint32_t m = 0;
#pragma unroll
      for (int e = 0; e < kChunk; ++e) {
        q = __fmaf_rn(x[e], x[e], q);
        m = max(m, abs_bits_canonical(x[e]));
      }
      for (int off = W / 2; off >= 1; off /= 2) {
        q = __fadd_rn(q, __shfl_xor_sync(0xffffffffu, q, off));
        m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
      }
      const int c = norm_exponent(m);
      const float down = exp2i(-c);
      float ssum = 0.0f;
#pragma unroll
      for (int e = 0; e < kChunk; ++e) {
        const float xs = __fmul_rn(x[e], down);
        ssum = __fmaf_rn(xs, xs, ssum);
      }
      for (int off = W / 2; off >= 1; off /= 2)
        ssum = __fadd_rn(ssum, __shfl_xor_sync(0xffffffffu, ssum, off));
      if (i < len && chunk == 0 && !norm_is_plain(q))
        result = max(result, abs_bits_canonical(__fmul_rn(__fsqrt_rn(ssum), exp2i(c))));
    }
  }
  return result;
}

// grid: (row tiles, heads, batch), block kind y = blockIdx.y + y0. Blocks with y < n_heads
// compute Delta and ||dO|| for query head y; the others take max|K| and max|V| of KV head
// y - n_heads. Both kinds read two tensors, so the work is balanced whatever the group size.
// The launcher runs all kinds (y0 0, n_heads + n_kv_heads of them), the query kinds only
// (y0 0, n_heads: K / V bounds given) or the K / V kinds only (y0 n_heads, n_kv_heads).
template <class Tag>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    bwd_preprocess_kernel(const fold_attn_problem_t p, const fold_tensor_t k, const fold_tensor_t v,
                          const fold_tensor_t out, const fold_tensor_t dout,
                          float *__restrict__ delta, uint32_t *__restrict__ bounds,
                          int32_t *__restrict__ dq_grid, const int y0) {
  __shared__ uint32_t block_bounds[FOLD_BWD_BOUNDS];
  __shared__ uint32_t rare_rows, scaled_max;  // rows needing the scaled ||dO_i||; their max
  if (threadIdx.x < FOLD_BWD_BOUNDS) block_bounds[threadIdx.x] = 0;
  if (threadIdx.x == 0) rare_rows = scaled_max = 0;
  __syncthreads();

  const int b = blockIdx.z;
  const int y = static_cast<int>(blockIdx.y) + y0;
  const bool kv_block = y >= p.n_heads;
  const int head = kv_block ? y - p.n_heads : y;
  const int hk = kv_block ? head : head / (p.n_heads / p.n_kv_heads);
  const fold_tensor_t ta = kv_block ? k : dout;
  const fold_tensor_t tb = kv_block ? v : out;
  const Request r = request_of(p, b);
  const int D = p.head_dim;
  const int W = reduce_lanes(D);
  const int lane = threadIdx.x & 31;
  const int chunk = lane % W;
  const bool has_chunk = chunk * kChunk < D;
  const int rows_per_pass = kWarps * (32 / W);
  const int row_in_pass = (threadIdx.x >> 5) * (32 / W) + lane / W;
  constexpr int kElemSize = 2;

  // Every load of kPasses passes is issued before any is used: enough bytes in flight per
  // thread to keep HBM busy (one 16-byte load per tensor per pass would not).
  const auto chunk_ptr = [&](const fold_tensor_t &t, int64_t i) {
    return reinterpret_cast<const uint4 *>(static_cast<const char *>(t.data) +
                                           (element_offset(p, t, b, r, i, head) + chunk * kChunk) *
                                               kElemSize);
  };
  uint32_t max_a = 0, max_b = 0;  // |K|, |V| (KV blocks) or plain rows' ||dO||^2, |Delta|
  bool needs_scaled = false;      // a row of this thread needs the scaled norm
  const int64_t rows_per_block = static_cast<int64_t>(rows_per_pass) * kPasses;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * rows_per_block; base < r.len;
       base += static_cast<int64_t>(gridDim.x) * rows_per_block) {
    uint4 raw_a[kPasses], raw_b[kPasses];
#pragma unroll
    for (int s = 0; s < kPasses; ++s) {
      const int64_t i = base + s * rows_per_pass + row_in_pass;
      const uint4 zero = make_uint4(0, 0, 0, 0);
      const bool ok = i < r.len && has_chunk;
      raw_a[s] = ok ? *chunk_ptr(ta, i) : zero;
      raw_b[s] = ok ? *chunk_ptr(tb, i) : zero;
    }
#pragma unroll
    for (int s = 0; s < kPasses; ++s) {
      float xa[8], xb[8];
      unpack8(raw_a[s], xa, Tag{});
      unpack8(raw_b[s], xb, Tag{});
      if (kv_block) {
        // Slots with no data hold zeros, which never raise a max of |x|.
#pragma unroll
        for (int e = 0; e < kChunk; ++e) {
          max_a = max(max_a, abs_bits_canonical(xa[e]));
          max_b = max(max_b, abs_bits_canonical(xb[e]));
        }
        continue;
      }
      float dsum = 0.0f, qsum = 0.0f;
#pragma unroll
      for (int e = 0; e < kChunk; ++e) {
        dsum = __fmaf_rn(xa[e], xb[e], dsum);
        qsum = __fmaf_rn(xa[e], xa[e], qsum);
      }
      // Butterfly over the W lanes of each row (uniform per block, so every lane of the warp
      // takes part). Lanes without a chunk hold +0.0f, as the canonical order says.
      for (int off = W / 2; off >= 1; off /= 2) {
        dsum = __fadd_rn(dsum, __shfl_xor_sync(0xffffffffu, dsum, off));
        qsum = __fadd_rn(qsum, __shfl_xor_sync(0xffffffffu, qsum, off));
      }
      const int64_t i = base + s * rows_per_pass + row_in_pass;
      if (dq_grid != nullptr && i < r.len && has_chunk) {
        // This lane's 8 columns of grid row (token, head): two 16-byte stores.
        uint4 *g = reinterpret_cast<uint4 *>(
            dq_grid + ((r.first + i) * p.n_heads + head) * static_cast<int64_t>(D) +
            chunk * kChunk);
        g[0] = make_uint4(0, 0, 0, 0);
        g[1] = make_uint4(0, 0, 0, 0);
      }
      if (i < r.len && chunk == 0) {
        const float dl = canonical_nan(dsum);
        delta[static_cast<int64_t>(head) * p.total_tokens + r.first + i] = dl;
        max_b = max(max_b, abs_bits_canonical(dl));
        // ||dO_i|| by row_reduce.h's canonical_norm. Plain rows keep max q (sqrt_rn is
        // monotone: the root is taken once, below).
        if (norm_is_plain(qsum)) max_a = max(max_a, abs_bits_canonical(qsum));
      }
      // A row that needs the scaled sum (huge, tiny or non-finite values) raises a flag; any
      // lane of the row may see it. A row of zeros does not: its norm is 0, which never raises
      // the max (loss-masked tokens give such rows, and they would send every block that holds
      // one through the second pass).
      if (i < r.len && has_chunk && !norm_is_plain(qsum) &&
          (qsum != 0.0f ||
           ((raw_a[s].x | raw_a[s].y | raw_a[s].z | raw_a[s].w) & 0x7fff7fffu) != 0))
        needs_scaled = true;
    }
  }

  const int slot_a = kv_block ? FOLD_BOUND_MAX_ABS_K : FOLD_BOUND_MAX_DO_NORM;
  const int slot_b = kv_block ? FOLD_BOUND_MAX_ABS_V : FOLD_BOUND_MAX_ABS_DELTA;
  block_max(max_a, &block_bounds[slot_a]);
  block_max(max_b, &block_bounds[slot_b]);
  if (needs_scaled) rare_rows = 1;
  __syncthreads();
  uint32_t value = threadIdx.x < FOLD_BWD_BOUNDS ? block_bounds[threadIdx.x] : 0;
  if (!kv_block) {
    // Query blocks hold max q of their plain rows: the norm is its root (sqrt_rn is monotone).
    if (threadIdx.x == FOLD_BOUND_MAX_DO_NORM)
      value = abs_bits_canonical(__fsqrt_rn(bits_to_float(value)));
    // Rows that need the scaled norm are redone after the loop, so the common path carries
    // no vote, shuffle or extra barrier for them (session 32: with a per-pass vote, or with an
    // extra __syncthreads_or per block, the preprocess took 4.5-6% longer). rare_rows is
    // block-uniform after the barrier.
    if (rare_rows != 0) {
      // element_offset is affine in the row: row 0's address and the token stride.
      const char *row0 =
          static_cast<const char *>(dout.data) + element_offset(p, dout, b, r, 0, head) * kElemSize;
      block_max(scaled_norms_max<Tag>(row0, dout.token_stride * kElemSize, r.len, D,
                                      static_cast<int64_t>(blockIdx.x) * rows_per_block,
                                      static_cast<int64_t>(gridDim.x) * rows_per_block),
                &scaled_max);
      __syncthreads();
      if (threadIdx.x == FOLD_BOUND_MAX_DO_NORM) value = max(value, scaled_max);
    }
  }
  if (threadIdx.x < FOLD_BWD_BOUNDS && value != 0)
    atomicMax(
        &bounds[(static_cast<int64_t>(b) * p.n_kv_heads + hk) * FOLD_BWD_BOUNDS + threadIdx.x],
        value);
}

void check(cudaError_t err, const char *what) {
  if (err != cudaSuccess) fail(FOLD_ERR_CUDA, std::string(what) + ": " + cudaGetErrorString(err));
}

// Blocks of kinds [y0, y0 + kinds) (see the kernel) over every request's rows.
void launch_kinds(const fold_attn_problem_t &p, fold_tensor_t k, fold_tensor_t v, fold_tensor_t out,
                  fold_tensor_t dout, float *delta, float *bounds, int32_t *dq_grid, int y0,
                  int kinds, cudaStream_t stream) {
  if (p.total_tokens == 0) return;
  const int rows_per_block = kWarps * (32 / reduce_lanes(p.head_dim)) * kPasses;
  const int longest = p.seqlen > 0 ? p.seqlen : 1;
  const int tiles = std::min((longest + rows_per_block - 1) / rows_per_block, 8192);
  if (p.batch > 65535 || p.n_heads + p.n_kv_heads > 65535)
    fail(FOLD_ERR_UNSUPPORTED, "batch and n_heads + n_kv_heads must be <= 65535 on CUDA");
  const dim3 grid(tiles, kinds, p.batch);
  auto *bound_bits = reinterpret_cast<uint32_t *>(bounds);
  if (p.dtype == FOLD_DTYPE_BF16)
    bwd_preprocess_kernel<Bf16Tag>
        <<<grid, kThreads, 0, stream>>>(p, k, v, out, dout, delta, bound_bits, dq_grid, y0);
  else
    bwd_preprocess_kernel<F16Tag>
        <<<grid, kThreads, 0, stream>>>(p, k, v, out, dout, delta, bound_bits, dq_grid, y0);
  check(cudaGetLastError(), "bwd_preprocess_kernel launch");
}

}  // namespace

void launch_bwd_preprocess(const fold_attn_problem_t &p, fold_tensor_t k, fold_tensor_t v,
                           fold_tensor_t out, fold_tensor_t dout, float *delta, float *bounds,
                           int32_t *dq_grid, const float *kv_bounds, void *stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  if (kv_bounds != nullptr) {
    // The forward's K / V maxima (other slots zero) are the starting point of the query
    // blocks' maxima: the same bits as the K / V blocks would give.
    check(cudaMemcpyAsync(bounds, kv_bounds, bounds_bytes(p), cudaMemcpyDeviceToDevice, stream),
          "cudaMemcpyAsync(bounds)");
    return launch_kinds(p, k, v, out, dout, delta, bounds, dq_grid, 0, p.n_heads, stream);
  }
  // Zeroed bits are the identity of the max over non-negative bit patterns.
  check(cudaMemsetAsync(bounds, 0, bounds_bytes(p), stream), "cudaMemsetAsync(bounds)");
  launch_kinds(p, k, v, out, dout, delta, bounds, dq_grid, 0, p.n_heads + p.n_kv_heads, stream);
}

void launch_kv_bounds(const fold_attn_problem_t &p, fold_tensor_t k, fold_tensor_t v,
                      float *kv_bounds, void *stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  check(cudaMemsetAsync(kv_bounds, 0, bounds_bytes(p), stream), "cudaMemsetAsync(kv_bounds)");
  // The K / V kinds read neither out, dout nor delta.
  launch_kinds(p, k, v, k, k, nullptr, kv_bounds, nullptr, p.n_heads, p.n_kv_heads, stream);
}

}  // namespace fold::cuda
