// Deterministic training backward on the GPU, v0 (ALGORITHMS.md section 5).
//
//   1. preprocess (bwd_preprocess.cu): Delta, bounds, and the dQ grid zeroed on the way.
//   2. main kernel: one CTA per (key block of backward_plan(D).block_n, KV head, request). It
//      loops over the group's query heads, then the query blocks that see its key block (all,
//      or with causal masking those ending after its first key, or with a sliding window those
//      its window reaches: backward_window.cuh), in that fixed order:
//        A. S = Q K^T, dP = dO V^T (HMMA, fp32); P = 2^(S * scale * log2 e - lse * log2 e),
//           dS = P (dP - Delta); P and dS * 2^t are rounded to the input dtype into shared
//           memory (|dS * 2^t| < 2^14: fp16-safe, grid_scale.h);
//        B. dV += P^T dO and dK += (dS 2^t)^T Q in fp32 registers (fixed order: deterministic);
//        C. the dQ partial (dS 2^t) K of this (query block, key block) pair, in fp32, is scaled
//           by 2^(s - t), rounded to nearest-even int32 (saturating) and added into the int32
//           grid with red.global.add.s32: integer addition is associative, so the arrival
//           order of the CTAs cannot change the sum.
//      Q and dO of the next pair load (cp.async, second stage) while a pair runs A, B, C.
//      Epilogue: dK = acc * 2^-t * softmax_scale, dV = acc (NaN dK when the bounds are not
//      finite, as the CPU reference).
//   3. postprocess: dQ = float(grid) * 2^-s * softmax_scale, rounded to the dtype.
// s and t come from grid_scale() on the stored bounds, the rule the CPU reference uses.
// Nothing in the plan depends on the batch, the other requests or a request's offset.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "core/float_bits.h"
#include "core/grid_scale.h"
#include "core/problem.h"
#include "core/status.h"
#include "core/tile_plan.h"
#include "cuda/backward_window.cuh"
#include "cuda/launch.h"
#include "cuda/launch_setup.h"
#include "cuda/tile_mma.cuh"

namespace fold::cuda {

namespace {

using namespace tile;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
struct BwdCfg {
  static constexpr int kBm = backward_plan(D).block_m;
  static constexpr int kBn = backward_plan(D).block_n;
  static constexpr int kLd = D + kPad;     // Q, dO, K, V tiles
  static constexpr int kLdp = kBn + kPad;  // P, dS tiles [kBm][kBn]
  // Phase A: the [kBm x kBn] score tile over warps: kRa row groups of 16 x kCa column groups.
  static constexpr int kRa = kBm / 16;
  static constexpr int kWa = kBn / (kWarps / kRa);
  // Phase B: the [kBn x D] dK/dV accumulators: kRb key groups of 16 x (D / kDb) column groups.
  static constexpr int kRb = kBn / 16;
  static constexpr int kDb = D / (kWarps / kRb);
  // Phase C: the [kBm x D] dQ partial: kRa row groups x (D / kDc) column groups.
  static constexpr int kDc = D / (kWarps / kRa);
  // Columns per register chunk in phases A and C (fewer where dK/dV hold many registers).
  static constexpr int kChA = kDb >= 96 ? 32 : (kWa < 64 ? kWa : 64);
  static constexpr int kChC = kDc > 64 ? 64 : kDc;
  // K, V; Q and dO in two stages (the next pair's load overlaps this pair's work); P, dS;
  // lse * log2 e and Delta of the current query block.
  static constexpr int kSmemBytes =
      (2 * kBn * kLd + 4 * kBm * kLd + 2 * kBm * kLdp) * 2 + 2 * kBm * 4;
  static_assert(kWarps % kRa == 0 && kWarps % kRb == 0, "warp partition");
  static_assert(kWa % kChA == 0 && kChA % 16 == 0 && kDc % kChC == 0 && kChC % 16 == 0 &&
                    kDb % 16 == 0,
                "tile partition");
};

// WIN: the sliding window's instance (backward_window.cuh): the query blocks of a key block are
// those its window reaches; a chunk is masked wherever the band of visible diagonals cuts it,
// and its products are skipped where the band leaves none of its pairs. Without it (calls with
// no window), the code is the causal-only kernel's, unchanged.
template <int D, class Tag, bool WIN = false>
__global__ void __launch_bounds__(kThreads, 1)
    backward_kernel(const fold_attn_problem_t p, const fold_tensor_t q, const fold_tensor_t k,
                    const fold_tensor_t v, const fold_tensor_t dout, const float *__restrict__ lse,
                    const float *__restrict__ delta, const float *__restrict__ bounds,
                    int32_t *__restrict__ dq_grid, const fold_tensor_t dk, const fold_tensor_t dv) {
  using Cfg = BwdCfg<D>;
  constexpr int kBm = Cfg::kBm, kBn = Cfg::kBn, kLd = Cfg::kLd, kLdp = Cfg::kLdp;
  extern __shared__ __align__(16) unsigned char smem[];
  auto *k_s = reinterpret_cast<uint16_t *>(smem);
  auto *v_s = k_s + kBn * kLd;
  uint16_t *const qdo_s = v_s + kBn * kLd;  // stage i: Q at qdo_s + 2 i kBm kLd, dO after it
  auto *p_s = qdo_s + 4 * kBm * kLd;
  auto *ds_s = p_s + kBm * kLdp;
  auto *lse2_s = reinterpret_cast<float *>(ds_s + kBm * kLdp);
  auto *delta_s = lse2_s + kBm;

  const int b = blockIdx.z;
  const int hk = blockIdx.y;
  const Request r = request_of(p, b);
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * kBn;
  if (k0 >= r.len) return;
  const int group = p.n_heads / p.n_kv_heads;
  const GridScale gs =
      grid_scale(bounds + (static_cast<int64_t>(b) * p.n_kv_heads + hk) * FOLD_BWD_BOUNDS, D);
  const float scale_log2 = p.softmax_scale * kLog2e;
  const float ds_scale = exp2i(gs.t);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const uint32_t k_base = smem_addr(k_s), v_base = smem_addr(v_s), p_base = smem_addr(p_s),
                 ds_base = smem_addr(ds_s);
  // The query blocks [q_begin, q_end) that see this key block.
  int64_t q_begin = p.causal ? (k0 / kBm) * kBm : 0;
  int32_t q_end = r.len;
  if constexpr (WIN) bwd::window_query_blocks<kBm>(p, k0, kBn, r.len, &q_begin, &q_end);

  // The pairs run in the fixed order (head h of the group, query block q0), h-major.
  load_tile<kBn, D, kThreads>(k_s, p, k, b, r, k0, hk);
  load_tile<kBn, D, kThreads>(v_s, p, v, b, r, k0, hk);
  load_tile<kBm, D, kThreads>(qdo_s, p, q, b, r, q_begin, hk * group);
  load_tile<kBm, D, kThreads>(qdo_s + kBm * kLd, p, dout, b, r, q_begin, hk * group);
  cp_async_commit();

  // Warp roles of the three phases.
  const int row_a = (warp % Cfg::kRa) * 16, col_a = (warp / Cfg::kRa) * Cfg::kWa;
  const int key_b = (warp % Cfg::kRb) * 16, d_b = (warp / Cfg::kRb) * Cfg::kDb;
  const int row_c = row_a, d_c = (warp / Cfg::kRa) * Cfg::kDc;

  constexpr int kDbt = Cfg::kDb / 8;
  float dv_acc[kDbt][4], dk_acc[kDbt][4];
#pragma unroll
  for (int i = 0; i < kDbt; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) dv_acc[i][e] = dk_acc[i][e] = 0.0f;

  int stage = 0;
  for (int h = hk * group; h < (hk + 1) * group; ++h) {
    for (int64_t q0 = q_begin; q0 < q_end; q0 += kBm, stage ^= 1) {
      // lse and Delta of this pair (phase A of the previous pair, their last reader, ended
      // before the previous pair's middle barrier).
      for (int i = threadIdx.x; i < kBm; i += kThreads) {
        const bool ok = q0 + i < r.len;
        const int64_t row = static_cast<int64_t>(h) * p.total_tokens + r.first + q0 + i;
        lse2_s[i] = ok ? lse[row] * kLog2e : 0.0f;
        delta_s[i] = ok ? delta[row] : 0.0f;
      }
      // This pair's Q and dO have landed, and every warp is done with the previous pair
      // (its P, dS and the other Q/dO stage are free).
      cp_async_wait_all();
      __syncthreads();
      {
        int next_h = h;
        int64_t next_q0 = q0 + kBm;
        if (next_q0 >= q_end) {
          next_h = h + 1;
          next_q0 = q_begin;
        }
        if (next_h < (hk + 1) * group) {
          uint16_t *next = qdo_s + (stage ^ 1) * 2 * kBm * kLd;
          load_tile<kBm, D, kThreads>(next, p, q, b, r, next_q0, next_h);
          load_tile<kBm, D, kThreads>(next + kBm * kLd, p, dout, b, r, next_q0, next_h);
          cp_async_commit();
        }
      }
      const uint32_t q_base = smem_addr(qdo_s + stage * 2 * kBm * kLd);
      const uint32_t do_base = q_base + 2u * kBm * kLd;

      // ---- A: P and dS * 2^t of the warp's [16 x kWa] part, in chunks of kChA keys.
      constexpr int kNa = Cfg::kChA / 8;
#pragma unroll 1
      for (int c0 = col_a; c0 < col_a + Cfg::kWa; c0 += Cfg::kChA) {
        float s[kNa][4], dp[kNa][4];
#pragma unroll
        for (int i = 0; i < kNa; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[i][e] = dp[i][e] = 0.0f;
        bool all_masked = p.causal && k0 + c0 > q0 + row_a + 15;
        // WIN: the visible diagonals of the chunk (keys chunk-relative, rows tile-relative;
        // causal included), and whether they leave none of the warp's pairs (then need_mask,
        // below, holds too: the chunk is zeroed).
        bwd::DiagBand band{};
        if constexpr (WIN) {
          band = bwd::diag_band(p, q0, k0 + c0);
          all_masked = all_masked || band.excludes(row_a, row_a + 15, 0, Cfg::kChA - 1);
        }
        if (!all_masked) {
#pragma unroll
          for (int kk = 0; kk < D; kk += 16) {
            uint32_t aq[4], ado[4];
            load_a(aq, q_base, kLd, row_a, kk, lane);
            load_a(ado, do_base, kLd, row_a, kk, lane);
#pragma unroll
            for (int nt = 0; nt < kNa; nt += 2) {
              uint32_t bk[4], bv[4];
              load_b_nk(bk, k_base, kLd, c0 + nt * 8, kk, lane);
              load_b_nk(bv, v_base, kLd, c0 + nt * 8, kk, lane);
              mma(s[nt], aq, bk[0], bk[1], Tag{});
              mma(s[nt + 1], aq, bk[2], bk[3], Tag{});
              mma(dp[nt], ado, bv[0], bv[1], Tag{});
              mma(dp[nt + 1], ado, bv[2], bv[3], Tag{});
            }
          }
        }
        // Masks only where the chunk reaches past the request's end (keys or rows) or past
        // the diagonal; positions are request-relative, so the choice is batch-invariant.
        bool need_mask = k0 + c0 + Cfg::kChA > r.len || q0 + row_a + 16 > r.len ||
                         (p.causal && k0 + c0 + Cfg::kChA - 1 > q0 + row_a);
        // WIN: also where the band cuts the chunk, on either side.
        if constexpr (WIN) need_mask = need_mask || band.cuts(row_a, row_a + 15, 0, Cfg::kChA - 1);
        // In chunk-relative units: key j_rel is valid when j_rel < key_limit, row i (tile-
        // relative) when i < row_limit, and causal allows j_rel <= diag + i.
        const int key_limit =
            static_cast<int>(min(r.len - k0 - c0, static_cast<int64_t>(Cfg::kChA)));
        const int row_limit = static_cast<int>(min(r.len - q0, static_cast<int64_t>(kBm)));
        const int diag = static_cast<int>(q0 - k0 - c0);
        const auto finish = [&](auto masked) {
          constexpr bool kMasked = decltype(masked)::value;
#pragma unroll
          for (int nt = 0; nt < kNa; ++nt)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const int i = row_a + g + 8 * half;
              const int j = c0 + nt * 8 + 2 * t;
              const float lse2 = lse2_s[i], dl = delta_s[i];
              float pv[2], dsv[2];
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int j_rel = nt * 8 + 2 * t + e;
                bool ok = true;
                if constexpr (kMasked && WIN)
                  ok = i < row_limit && j_rel < key_limit && band.holds(j_rel - i);
                else if constexpr (kMasked)
                  ok = i < row_limit && j_rel < key_limit && (!p.causal || j_rel <= diag + i);
                // Clamped to 1 as in the CPU reference: the stored LSE is rounded, and the
                // grid's and fp16's bounds rest on P <= 1 (grid_scale.h).
                const float pij =
                    ok ? fminf(1.0f, fast_exp2(s[nt][2 * half + e] * scale_log2 - lse2)) : 0.0f;
                pv[e] = pij;
                dsv[e] = ok ? pij * (dp[nt][2 * half + e] - dl) * ds_scale : 0.0f;
              }
              *reinterpret_cast<uint32_t *>(&p_s[i * kLdp + j]) = pack2(pv[0], pv[1], Tag{});
              *reinterpret_cast<uint32_t *>(&ds_s[i * kLdp + j]) = pack2(dsv[0], dsv[1], Tag{});
            }
        };
        if (need_mask)
          finish(std::true_type{});
        else
          finish(std::false_type{});
      }
      __syncthreads();

      // ---- B: dV += P^T dO, dK += (dS 2^t)^T Q over the tile's query rows in order.
#pragma unroll 1
      for (int kq = 0; kq < kBm; kq += 16) {
        uint32_t ap[4], ads[4];
        load_a_trans(ap, p_base, kLdp, kq, key_b, lane);
        load_a_trans(ads, ds_base, kLdp, kq, key_b, lane);
#pragma unroll
        for (int dt = 0; dt < kDbt; dt += 2) {
          uint32_t bdo[4], bq[4];
          load_b_kn(bdo, do_base, kLd, kq, d_b + dt * 8, lane);
          load_b_kn(bq, q_base, kLd, kq, d_b + dt * 8, lane);
          mma(dv_acc[dt], ap, bdo[0], bdo[1], Tag{});
          mma(dv_acc[dt + 1], ap, bdo[2], bdo[3], Tag{});
          mma(dk_acc[dt], ads, bq[0], bq[1], Tag{});
          mma(dk_acc[dt + 1], ads, bq[2], bq[3], Tag{});
        }
      }

      // ---- C: this pair's dQ partial onto the integer grid, in chunks of kChC columns.
      constexpr int kNc = Cfg::kChC / 8;
#pragma unroll 1
      for (int c = 0; c < Cfg::kDc; c += Cfg::kChC) {
        float acc[kNc][4];
#pragma unroll
        for (int i = 0; i < kNc; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < kBn; kk += 16) {
          uint32_t ads[4];
          load_a(ads, ds_base, kLdp, row_c, kk, lane);
#pragma unroll
          for (int dt = 0; dt < kNc; dt += 2) {
            uint32_t bk[4];
            load_b_kn(bk, k_base, kLd, kk, d_c + c + dt * 8, lane);
            mma(acc[dt], ads, bk[0], bk[1], Tag{});
            mma(acc[dt + 1], ads, bk[2], bk[3], Tag{});
          }
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int64_t row = q0 + row_c + g + 8 * half;
          if (row >= r.len) continue;
          int32_t *cell = dq_grid + ((r.first + row) * p.n_heads + h) * D + d_c + c + 2 * t;
#pragma unroll
          for (int dt = 0; dt < kNc; ++dt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int unit = __float2int_rn(scale_pow2(acc[dt][2 * half + e], gs.s - gs.t));
              if (unit != 0) atomicAdd(cell + dt * 8 + e, unit);
            }
        }
      }
    }
  }

  // ---- Epilogue: the key block's dK and dV.
  using T = typename Tag::T;
  const float nan = __int_as_float(0x7fffffff);
  const float dk_unscale = exp2i(-gs.t);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t key = k0 + key_b + g + 8 * half;
    if (key >= r.len) continue;
    T *dk_row = static_cast<T *>(dk.data) + element_offset(p, dk, b, r, key, hk) + d_b + 2 * t;
    T *dv_row = static_cast<T *>(dv.data) + element_offset(p, dv, b, r, key, hk) + d_b + 2 * t;
#pragma unroll
    for (int dt = 0; dt < kDbt; ++dt) {
      float x[2];
#pragma unroll
      for (int e = 0; e < 2; ++e)
        x[e] =
            gs.valid ? mul_rn(mul_rn(dk_acc[dt][2 * half + e], dk_unscale), p.softmax_scale) : nan;
      *reinterpret_cast<uint32_t *>(dk_row + dt * 8) = pack2(x[0], x[1], Tag{});
      *reinterpret_cast<uint32_t *>(dv_row + dt * 8) =
          pack2(dv_acc[dt][2 * half], dv_acc[dt][2 * half + 1], Tag{});
    }
  }
}

// dQ = float(grid) * 2^-s * softmax_scale. grid: (row tiles, n_heads, batch).
constexpr int kPostRows = 64;

template <class Tag>
__global__ void __launch_bounds__(kThreads)
    bwd_postprocess_kernel(const fold_attn_problem_t p, const float *__restrict__ bounds,
                           const int32_t *__restrict__ dq_grid, const fold_tensor_t dq) {
  using T = typename Tag::T;
  const int b = blockIdx.z, h = blockIdx.y;
  const int hk = h / (p.n_heads / p.n_kv_heads);
  const Request r = request_of(p, b);
  const int D = p.head_dim;
  const GridScale gs =
      grid_scale(bounds + (static_cast<int64_t>(b) * p.n_kv_heads + hk) * FOLD_BWD_BOUNDS, D);
  const float unscale = exp2i(-gs.s);
  const float nan = __int_as_float(0x7fffffff);
  const int chunks = D / 8;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kPostRows;
  for (int idx = threadIdx.x; idx < kPostRows * chunks; idx += kThreads) {
    const int64_t row = row0 + idx / chunks;
    const int chunk = idx % chunks;
    if (row >= r.len) continue;
    const int4 *src =
        reinterpret_cast<const int4 *>(dq_grid + ((r.first + row) * p.n_heads + h) * D + chunk * 8);
    const int4 lo = src[0], hi = src[1];
    const int units[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    uint32_t packed[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float x[2];
#pragma unroll
      for (int u = 0; u < 2; ++u)
        x[u] = gs.valid
                   ? mul_rn(mul_rn(static_cast<float>(units[2 * e + u]), unscale), p.softmax_scale)
                   : nan;
      packed[e] = pack2(x[0], x[1], Tag{});
    }
    T *dst = static_cast<T *>(dq.data) + element_offset(p, dq, b, r, row, h) + chunk * 8;
    *reinterpret_cast<uint4 *>(dst) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
}

void check(cudaError_t err, const char *what) {
  if (err != cudaSuccess) fail(FOLD_ERR_CUDA, std::string(what) + ": " + cudaGetErrorString(err));
}

template <int D, class Tag>
void launch_main(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k, fold_tensor_t v,
                 fold_tensor_t dout, const float *lse, const float *delta, const float *bounds,
                 int32_t *dq_grid, fold_tensor_t dk, fold_tensor_t dv, cudaStream_t stream) {
  using Cfg = BwdCfg<D>;
  // The windowed instance exactly when the call's window can cut (backward_window.cuh).
  auto kernel = window_may_mask(p) ? backward_kernel<D, Tag, true> : backward_kernel<D, Tag>;
  set_max_dynamic_smem(reinterpret_cast<const void *>(kernel), Cfg::kSmemBytes, "backward");
  const dim3 grid((p.seqlen + Cfg::kBn - 1) / Cfg::kBn, p.n_kv_heads, p.batch);
  kernel<<<grid, kThreads, Cfg::kSmemBytes, stream>>>(p, q, k, v, dout, lse, delta, bounds, dq_grid,
                                                      dk, dv);
  check(cudaGetLastError(), "backward_kernel launch");
}

template <class Tag>
void launch_main_dim(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k,
                     fold_tensor_t v, fold_tensor_t dout, const float *lse, const float *delta,
                     const float *bounds, int32_t *dq_grid, fold_tensor_t dk, fold_tensor_t dv,
                     cudaStream_t stream) {
  switch (p.head_dim) {
    case 64:
      return launch_main<64, Tag>(p, q, k, v, dout, lse, delta, bounds, dq_grid, dk, dv, stream);
    case 96:
      return launch_main<96, Tag>(p, q, k, v, dout, lse, delta, bounds, dq_grid, dk, dv, stream);
    case 128:
      return launch_main<128, Tag>(p, q, k, v, dout, lse, delta, bounds, dq_grid, dk, dv, stream);
    case 256:
      return launch_main<256, Tag>(p, q, k, v, dout, lse, delta, bounds, dq_grid, dk, dv, stream);
    default:
      fail(FOLD_ERR_UNSUPPORTED, "head_dim=" + std::to_string(p.head_dim) +
                                     ": the CUDA training kernels take 64, 96, 128 or 256");
  }
}

}  // namespace

void launch_backward(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k,
                     fold_tensor_t v, fold_tensor_t out, fold_tensor_t dout, const float *lse,
                     fold_tensor_t dq, fold_tensor_t dk, fold_tensor_t dv, const float *kv_bounds,
                     void *workspace, void *stream_ptr) {
  if (p.total_tokens == 0 || p.seqlen == 0) return;
  if (!training_head_dim_supported(p.head_dim))
    fail(FOLD_ERR_UNSUPPORTED, "head_dim=" + std::to_string(p.head_dim) +
                                   ": the CUDA training kernels take 64, 96, 128 or 256");
  if (p.batch > 65535 || p.n_heads > 65535)
    fail(FOLD_ERR_UNSUPPORTED, "batch and n_heads must be <= 65535 on CUDA");
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  const BackwardWorkspace ws = backward_workspace(p, workspace);
  // The preprocess also zeroes the dQ grid rows of every request's tokens (the only rows the
  // postprocess reads; the main kernels' adds past a request's end are zeros). With the
  // forward's K / V bounds it reads dO and O only; FOLD_BWD_KV_BOUNDS=0 (read at every call,
  // for A/B runs) ignores them, with the same bits.
  const char *kv_env = std::getenv("FOLD_BWD_KV_BOUNDS");
  const std::string kv_set = kv_env != nullptr ? kv_env : "";
  if (kv_set != "" && kv_set != "0" && kv_set != "1")
    fail(FOLD_ERR_INVALID_ARGUMENT, "FOLD_BWD_KV_BOUNDS=" + kv_set + ": expected 0 or 1");
  const bool use_kv = kv_bounds != nullptr && kv_set != "0";
  launch_bwd_preprocess(p, k, v, out, dout, ws.delta, ws.bounds, ws.dq_grid,
                        use_kv ? kv_bounds : nullptr, stream);
  const dim3 post_grid((p.seqlen + kPostRows - 1) / kPostRows, p.n_heads, p.batch);
  // v1 (wgmma, backward_sm90.cu) where it covers the head_dim, v0 otherwise or when the
  // environment has FOLD_BWD_V0=1 (read at every call: for comparisons on the GPU; both are
  // deterministic and batch-invariant, their bits differ).
  const char *env = std::getenv("FOLD_BWD_V0");
  const bool force_v0 = env != nullptr && env[0] == '1';
  const bool v1 = !force_v0 && launch_backward_main_sm90(p, q, k, v, dout, lse, ws.delta, ws.bounds,
                                                         ws.dq_grid, dk, dv, stream);
  if (p.dtype == FOLD_DTYPE_BF16) {
    if (!v1)
      launch_main_dim<Bf16>(p, q, k, v, dout, lse, ws.delta, ws.bounds, ws.dq_grid, dk, dv, stream);
    bwd_postprocess_kernel<Bf16><<<post_grid, kThreads, 0, stream>>>(p, ws.bounds, ws.dq_grid, dq);
  } else {
    if (!v1)
      launch_main_dim<F16>(p, q, k, v, dout, lse, ws.delta, ws.bounds, ws.dq_grid, dk, dv, stream);
    bwd_postprocess_kernel<F16><<<post_grid, kThreads, 0, stream>>>(p, ws.bounds, ws.dq_grid, dq);
  }
  check(cudaGetLastError(), "bwd_postprocess_kernel launch");
}

}  // namespace fold::cuda
