// Training forward on the GPU, v0 (kept as the fallback of forward.cu for views TMA cannot
// describe: a token stride of 0; see tensor_map.h): FlashAttention-2 style online softmax in base 2
// with m16n8k16 tensor-core MMAs (HMMA, fp32 accumulation), one CTA per (query block, head,
// request) and 8 warps of 16 query rows each. K/V blocks stream through two cp.async stages
// (block j + 1 loads while block j computes).
//
// Semantics follow the CPU reference (cpu/forward.cpp): s = (q . k) * scale * log2(e) in
// fp32, P = 2^(s - m) rounded to the input dtype for P.V, l summed from the unrounded P,
// out = acc / l, lse = (m + log2 l) * ln 2. Bits may differ from the CPU (exp2, summation
// order), but not between calls: tiles start at each request's first token and the plan is
// forward_plan(head_dim) alone, so a row's result never depends on the batch around it.
//
// Sliding windows (core/window.h) in the kWindow instance, which the launcher runs for a call
// whose window can mask something (the others run the code of before, untouched): a query block
// visits the key blocks visible_keys names (its first key rounded down to a block start, as
// the CPU reference), a warp skips a block whose every key is hidden from all its rows, and the
// mask is window_mask.cuh's (causal and the request's end included). A row that sees no key of
// a block keeps its m, l and acc (alpha = 1, P = 0), as the CPU reference's skip of it does.
//
// Attention sinks (p.sinks) in the kSinks instances, which the launcher runs for a call with sinks
// (the others, again, run the code of before): the block's head's sink joins every row once after
// its last key block, before out = acc / l and the LSE, as the CPU reference's add_sink and
// forward.cu's add_sink (there for wgmma's fragment layout) do.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "core/problem.h"
#include "core/status.h"
#include "core/tile_plan.h"
#include "core/window.h"
#include "cuda/launch.h"
#include "cuda/launch_setup.h"
#include "cuda/tile_mma.cuh"
#include "cuda/window_mask.cuh"

namespace fold::cuda {

namespace {

using namespace tile;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int D>
struct FwdCfg {
  static constexpr int kBm = forward_plan(D).block_m;
  static constexpr int kBn = forward_plan(D).block_n;
  static constexpr int kLd = D + kPad;
  // Q, and K and V in two stages: block j + 1 loads while block j computes.
  static constexpr int kSmemBytes = (kBm + 4 * kBn) * kLd * 2;
  static_assert(kBm == 16 * kWarps, "one warp per 16 query rows");
};

// The sink of base-2 logit s2 joins rows g and g + 8 of the warp (forward.cu's add_sink, for the
// m16n8 accumulator layout: o[dt][0..1] row g, o[dt][2..3] row g + 8); l holds the rows' whole
// sums (reduced over the quad), so each row takes it once.
template <int kDt>
__device__ __forceinline__ void add_sink(float s2, float (&m)[2], float (&l)[2],
                                         float (&o)[kDt][4]) {
  const float neg_inf = -__int_as_float(0x7f800000);
  float alpha[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float m_new = fmaxf(m[i], s2);
    alpha[i] = m_new == m[i] ? 1.0f : fast_exp2(m[i] - m_new);  // (m = -inf < s2: 0)
    const float m_use = m_new == neg_inf ? 0.0f : m_new;
    l[i] = __fadd_rn(__fmul_rn(l[i], alpha[i]), fast_exp2(s2 - m_use));
    m[i] = m_new;
  }
#pragma unroll
  for (int dt = 0; dt < kDt; ++dt) {
    o[dt][0] *= alpha[0];
    o[dt][1] *= alpha[0];
    o[dt][2] *= alpha[1];
    o[dt][3] *= alpha[1];
  }
}

template <int D, class Tag, bool kWindow, bool kSinks>
__global__ void __launch_bounds__(kThreads, 1)
    forward_kernel(const fold_attn_problem_t p, const fold_tensor_t q, const fold_tensor_t k,
                   const fold_tensor_t v, const fold_tensor_t out, float *__restrict__ lse) {
  using Cfg = FwdCfg<D>;
  constexpr int kBm = Cfg::kBm, kBn = Cfg::kBn, kLd = Cfg::kLd;
  constexpr int kNt = kBn / 8;  // score n-tiles per warp
  constexpr int kDt = D / 8;    // output n-tiles per warp
  extern __shared__ __align__(16) unsigned char smem[];
  auto *q_s = reinterpret_cast<uint16_t *>(smem);
  uint16_t *const kv_s = q_s + kBm * kLd;  // stage i: K at kv_s + 2 i kBn kLd, V after it

  const int b = blockIdx.z;
  const int h = blockIdx.y;
  const Request r = request_of(p, b);
  const int n_qblocks = (r.len + kBm - 1) / kBm;
  // Causal: the longest query blocks (most keys) start first.
  const int qb = p.causal ? n_qblocks - 1 - static_cast<int>(blockIdx.x) : blockIdx.x;
  if (qb < 0 || qb >= n_qblocks) return;
  const int64_t q0 = static_cast<int64_t>(qb) * kBm;
  const int hk = h / (p.n_heads / p.n_kv_heads);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int r0 = warp * 16;  // the warp's first row in the block
  const float scale_log2 = p.softmax_scale * kLog2e;
  const float neg_inf = -__int_as_float(0x7f800000);
  // The head's sink (base 2), read once per block (kSinks).
  [[maybe_unused]] float sink2 = 0.0f;
  if constexpr (kSinks) sink2 = __ldg(p.sinks + h) * kLog2e;

  int64_t k_start = 0;  // (a multiple of kBn: blocks start at the request's start)
  int64_t k_end = p.causal ? min(static_cast<int64_t>(r.len), q0 + kBm) : r.len;
  RowsWindow win{};  // the window of the warp's 16 rows (kWindow)
  if constexpr (kWindow) {
    int64_t k_lo = 0;
    visible_keys(p, q0, min(static_cast<int64_t>(r.len), q0 + kBm), r.len, &k_lo, &k_end);
    k_start = k_lo / kBn * kBn;
    win = rows_window(p, static_cast<int>(q0) + r0);
  }
  load_tile<kBm, D, kThreads>(q_s, p, q, b, r, q0, h);
  load_tile<kBn, D, kThreads>(kv_s, p, k, b, r, k_start, hk);
  load_tile<kBn, D, kThreads>(kv_s + kBn * kLd, p, v, b, r, k_start, hk);
  cp_async_commit();

  float o[kDt][4];
#pragma unroll
  for (int i = 0; i < kDt; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {neg_inf, neg_inf}, l[2] = {0.0f, 0.0f};  // rows g and g + 8 (l: lane-partial)

  const uint32_t q_base = smem_addr(q_s);
  int stage = 0;
  for (int64_t k0 = k_start; k0 < k_end; k0 += kBn, stage ^= 1) {
    // Block k0 has landed, and every warp is done with the other stage (block k0 - kBn).
    cp_async_wait_all();
    __syncthreads();
    if (k0 + kBn < k_end) {
      uint16_t *next = kv_s + (stage ^ 1) * 2 * kBn * kLd;
      load_tile<kBn, D, kThreads>(next, p, k, b, r, k0 + kBn, hk);
      load_tile<kBn, D, kThreads>(next + kBn * kLd, p, v, b, r, k0 + kBn, hk);
      cp_async_commit();
    }
    const uint32_t k_base = smem_addr(kv_s + stage * 2 * kBn * kLd);
    const uint32_t v_base = k_base + 2u * kBn * kLd;
    const BlockMask<kBn> bm(win, static_cast<int>(k0), r.len);  // (kWindow)
    // Every key is masked for this warp.
    if (kWindow ? bm.all() : (p.causal && k0 > q0 + r0 + 15)) continue;

    float s[kNt][4];
#pragma unroll
    for (int i = 0; i < kNt; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D; kk += 16) {
      uint32_t a[4];
      load_a(a, q_base, kLd, r0, kk, lane);
#pragma unroll
      for (int nt = 0; nt < kNt; nt += 2) {
        uint32_t bf[4];
        load_b_nk(bf, k_base, kLd, nt * 8, kk, lane);
        mma(s[nt], a, bf[0], bf[1], Tag{});
        mma(s[nt + 1], a, bf[2], bf[3], Tag{});
      }
    }

    // Mask and row maxima of the raw scores (rows g and g + 8 of the warp); the scale is
    // applied to the maxima (scale > 0, so max and rounding commute) and fused into the
    // exponent: P = 2^(s * scale log2 e - m). Only blocks that reach past the request's end
    // or the warp's diagonal (or an edge of its rows' windows) are masked (a choice made from
    // positions inside the request alone, so it cannot depend on the batch either).
    float row_max[2] = {neg_inf, neg_inf};
    const bool need_mask =
        kWindow ? bm.any() : (k0 + kBn > r.len || (p.causal && k0 + kBn - 1 > q0 + r0));
    if (need_mask) {
      const int key_limit = static_cast<int>(min(r.len - k0, static_cast<int64_t>(kBn)));
      const int diag = static_cast<int>(q0 + r0 - k0);  // key (block-relative) <= diag + row
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = g + (e >> 1) * 8;
          const int key = nt * 8 + 2 * t + (e & 1);
          const bool masked =
              kWindow ? bm.masked(row, key) : (key >= key_limit || (p.causal && key > diag + row));
          if (masked) s[nt][e] = neg_inf;
          row_max[e >> 1] = fmaxf(row_max[e >> 1], s[nt][e]);
        }
    } else {
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) row_max[e >> 1] = fmaxf(row_max[e >> 1], s[nt][e]);
    }
    float alpha[2], m_use[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      row_max[i] = fmaxf(row_max[i], __shfl_xor_sync(0xffffffffu, row_max[i], 1));
      row_max[i] = fmaxf(row_max[i], __shfl_xor_sync(0xffffffffu, row_max[i], 2));
      const float m_new = fmaxf(m[i], row_max[i] * scale_log2);
      // A row with every key so far masked keeps m = -inf, l = 0, acc = 0; its P is
      // 2^(-inf - 0) = 0 below. One that sees no key of this block alone (causal, window)
      // keeps its m: alpha = 2^0 = 1 exactly, and its P is 0.
      alpha[i] = m_new == neg_inf ? 1.0f : (m[i] == neg_inf ? 0.0f : fast_exp2(m[i] - m_new));
      m[i] = m_new;
      m_use[i] = m_new == neg_inf ? 0.0f : m_new;
      l[i] *= alpha[i];
    }
#pragma unroll
    for (int dt = 0; dt < kDt; ++dt) {
      o[dt][0] *= alpha[0];
      o[dt][1] *= alpha[0];
      o[dt][2] *= alpha[1];
      o[dt][3] *= alpha[1];
    }
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float pij = fast_exp2(__fmaf_rn(s[nt][e], scale_log2, -m_use[e >> 1]));
        s[nt][e] = pij;
        l[e >> 1] += pij;
      }

      // acc += P16 . V: the C fragments of two score n-tiles form one A fragment.
#pragma unroll
    for (int kt = 0; kt < kBn / 16; ++kt) {
      uint32_t a[4];
      a[0] = pack2(s[2 * kt][0], s[2 * kt][1], Tag{});
      a[1] = pack2(s[2 * kt][2], s[2 * kt][3], Tag{});
      a[2] = pack2(s[2 * kt + 1][0], s[2 * kt + 1][1], Tag{});
      a[3] = pack2(s[2 * kt + 1][2], s[2 * kt + 1][3], Tag{});
#pragma unroll
      for (int dt = 0; dt < kDt; dt += 2) {
        uint32_t bf[4];
        load_b_kn(bf, v_base, kLd, kt * 16, dt * 8, lane);
        mma(o[dt], a, bf[0], bf[1], Tag{});
        mma(o[dt + 1], a, bf[2], bf[3], Tag{});
      }
    }
  }

  // Epilogue: row sums, out = acc / l, lse = (m + log2 l) ln 2.
  using T = typename Tag::T;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
  }
  // The sink, once per row (l is the row's whole sum now), before the division and the LSE.
  if constexpr (kSinks) add_sink(sink2, m, l, o);
  const float inv[2] = {1.0f / l[0], 1.0f / l[1]};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t row = q0 + r0 + g + 8 * i;
    if (row >= r.len) continue;
    T *dst = static_cast<T *>(out.data) + element_offset(p, out, b, r, row, h);
#pragma unroll
    for (int dt = 0; dt < kDt; ++dt)
      *reinterpret_cast<uint32_t *>(dst + dt * 8 + 2 * t) =
          pack2(o[dt][2 * i] * inv[i], o[dt][2 * i + 1] * inv[i], Tag{});
    if (t == 0)
      lse[static_cast<int64_t>(h) * p.total_tokens + r.first + row] = (m[i] + __log2f(l[i])) * kLn2;
  }
}

void check(cudaError_t err, const char *what) {
  if (err != cudaSuccess) fail(FOLD_ERR_CUDA, std::string(what) + ": " + cudaGetErrorString(err));
}

// kWindow: the instance for a call whose sliding window can mask something (window_may_mask:
// the window settings alone, never the batch's lengths); every other call runs the instance of
// before. kSinks: the instance for a call with attention sinks (p.sinks != nullptr).
template <int D, class Tag, bool kWindow, bool kSinks>
void launch(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k, fold_tensor_t v,
            fold_tensor_t out, float *lse, cudaStream_t stream) {
  using Cfg = FwdCfg<D>;
  auto kernel = forward_kernel<D, Tag, kWindow, kSinks>;
  set_max_dynamic_smem(reinterpret_cast<const void *>(kernel), Cfg::kSmemBytes, "forward");
  const dim3 grid((p.seqlen + Cfg::kBm - 1) / Cfg::kBm, p.n_heads, p.batch);
  kernel<<<grid, kThreads, Cfg::kSmemBytes, stream>>>(p, q, k, v, out, lse);
  check(cudaGetLastError(), "forward_kernel launch");
}

template <class Tag, bool kWindow, bool kSinks>
void launch_dim(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k, fold_tensor_t v,
                fold_tensor_t out, float *lse, cudaStream_t stream) {
  switch (p.head_dim) {
    case 64:
      return launch<64, Tag, kWindow, kSinks>(p, q, k, v, out, lse, stream);
    case 96:
      return launch<96, Tag, kWindow, kSinks>(p, q, k, v, out, lse, stream);
    case 128:
      return launch<128, Tag, kWindow, kSinks>(p, q, k, v, out, lse, stream);
    case 256:
      return launch<256, Tag, kWindow, kSinks>(p, q, k, v, out, lse, stream);
    default:
      fail(FOLD_ERR_UNSUPPORTED, "head_dim=" + std::to_string(p.head_dim) +
                                     ": the CUDA training kernels take 64, 96, 128 or 256");
  }
}

}  // namespace

void launch_forward_v0(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k,
                       fold_tensor_t v, fold_tensor_t out, float *lse, void *stream_ptr) {
  if (p.total_tokens == 0 || p.seqlen == 0) return;
  if (p.batch > 65535 || p.n_heads > 65535)
    fail(FOLD_ERR_UNSUPPORTED, "batch and n_heads must be <= 65535 on CUDA");
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  const bool windowed = window_may_mask(p);
  if (p.sinks != nullptr) {
    if (p.dtype == FOLD_DTYPE_BF16)
      windowed ? launch_dim<Bf16, true, true>(p, q, k, v, out, lse, stream)
               : launch_dim<Bf16, false, true>(p, q, k, v, out, lse, stream);
    else
      windowed ? launch_dim<F16, true, true>(p, q, k, v, out, lse, stream)
               : launch_dim<F16, false, true>(p, q, k, v, out, lse, stream);
    return;
  }
  if (p.dtype == FOLD_DTYPE_BF16)
    windowed ? launch_dim<Bf16, true, false>(p, q, k, v, out, lse, stream)
             : launch_dim<Bf16, false, false>(p, q, k, v, out, lse, stream);
  else
    windowed ? launch_dim<F16, true, false>(p, q, k, v, out, lse, stream)
             : launch_dim<F16, false, false>(p, q, k, v, out, lse, stream);
}

}  // namespace fold::cuda
