// Deterministic training backward on the GPU, v1: the main kernel with wgmma (sm_90a).
// (At D 96 / 128 the default is the warp-specialised form of this kernel, backward_sm90_ws.cuh:
// the same arithmetic, with a producer warpgroup; this file's kernel stays the default at D 64,
// where it measured faster, and is FOLD_BWD_VARIANT=sync elsewhere.)
// Preprocess, the zeroed dQ grid and the postprocess are v0's (backward.cu); this file only
// replaces the main kernel for head_dim 64, 96 and 128 (256 keeps v0's, see
// notes/training_kernels.md "v1 backward").
//
// One CTA per (key block of backward_plan(D).block_n = 128 keys, KV head, request), two
// warpgroups (256 threads). Warpgroup w owns keys 64 w .. 64 w + 63 of the block and their
// dK, dV accumulators (fp32 registers). The CTA loops over the group's query heads, then the
// query blocks that see its key block, in that fixed order (as v0 and the CPU reference).
// Per (query block, key block) pair, with Bm = block_m query rows:
//   1. S^T = K_w Q^T and dP^T = V_w dO^T      wgmma SS, m64n64, K-major A and B
//   2. P^T = min(1, 2^(S^T scale log2e - lse log2e)), dS^T = P^T (dP^T - Delta) 2^t, masked
//      (keys/rows past the request's end, causal, the sliding window: backward_window.cuh),
//      rounded to the dtype in registers
//   3. dV += P^T dO and dK += dS^T Q          wgmma RS (A = P^T / dS^T from registers),
//                                              B = dO / Q MN-major (transposed descriptor)
//   4. dS^T goes to shared memory; dQ partial = dS K (fp32)
//                                              wgmma SS, A = dS MN-major, B = K MN-major
//      Bm = 64: warpgroup w takes dQ columns [64 w, min(D, 64 w + 64)); Bm = 128: rows 64 w..
//   5. the dQ partial is scaled by 2^(s - t), rounded to nearest-even int32 (saturating) into
//      a shared staging tile (D / 32 swizzled [Bm][32] column blocks), then pushed by one
//      thread with D / 32 TMA tensor reduce-adds (cp.reduce.async.bulk.tensor .add, int32
//      map of the grid): integer addition is associative, so the order in which CTAs arrive
//      cannot change a bit. Rows past the request's end are exactly 0 (their dS is masked
//      to 0), so adding them into the next request's rows changes nothing; rows past the
//      grid are dropped by TMA.
// Q and dO of the next pair load by TMA (one thread, on the stage's mbarrier; rows past the
// request's end are zeroed in shared memory after the wait), lse and Delta with cp.async
// (zero-filled past the end), into a second stage while the current pair computes. K and V
// load once per CTA with cp.async.
// Shared tiles use the 128-byte swizzle of wgmma (hopper/wgmma.cuh): one copy of K
// serves as K-major A of step 1 and MN-major B of step 4; Q and dO likewise for steps 1 / 3.
// Nothing depends on the batch, the other requests or the request's offset: tiles start at
// the request's first token, every order is fixed, rows/keys past its end contribute zero.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "core/float_bits.h"
#include "core/grid_scale.h"
#include "core/problem.h"
#include "core/status.h"
#include "core/tile_plan.h"
#include "cuda/backward_sm90_epilogue.cuh"
#include "cuda/backward_sm90_pair.cuh"
#include "cuda/backward_sm90_tiles.cuh"
#include "cuda/backward_sm90_ws.cuh"
#include "cuda/backward_window.cuh"
#include "cuda/hopper/stmatrix.cuh"
#include "cuda/hopper/tma.cuh"
#include "cuda/hopper/warpgroup.cuh"
#include "cuda/hopper/wgmma.cuh"
#include "cuda/launch.h"
#include "cuda/launch_setup.h"
#include "cuda/tensor_map.h"
#include "cuda/tile_mma.cuh"

namespace fold::cuda {

namespace {

namespace hp = hopper;
using bwd::cp_async4;
using bwd::QdoMuls;
using bwd::stage_index;
using tile::cp_async_commit;
using tile::cp_async_wait_all;
using tile::fast_exp2;
using tile::pack2;
using tile::smem_addr;

constexpr int kThreads = 256;  // two warpgroups
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
struct Sm90Cfg {
  static constexpr int kBm = backward_plan(D).block_m;
  static constexpr int kBn = backward_plan(D).block_n;
  static constexpr int kDBlocks = (D + 63) / 64;  // 128-byte column blocks of a [rows][D] tile
  static constexpr int kKBytes = kDBlocks * kBn * 128;
  static constexpr int kQBytes = kDBlocks * kBm * 128;
  static constexpr int kDsBytes = (kBm / 64) * kBn * 128;  // dS^T [row block][key][64 rows]
  // dQ staging: D / 32 column blocks [kBm rows][32 int32 = 128 B], 128-byte swizzled (the
  // layout of a TMA box {32, 1, kBm} with SWIZZLE_128B): 16-byte chunk c of row r at c ^ (r %
  // 8). The int2 stores of step 5 (8 rows x 4 column pairs per warp) are then conflict-free.
  static constexpr int kStageCols = 32;
  static constexpr int kStageBlocks = D / kStageCols;
  static constexpr int kStageBlockBytes = kBm * kStageCols * 4;
  static constexpr int kStageBytes = kStageBlocks * kStageBlockBytes;
  // Byte offsets from the 1024-aligned base.
  static constexpr int kOffK = 0;
  static constexpr int kOffV = kKBytes;
  static constexpr int kOffQdo = 2 * kKBytes;  // stage i: Q at + 2 i kQBytes, dO after it
  static constexpr int kOffDs = kOffQdo + 4 * kQBytes;
  static constexpr int kOffStage = kOffDs + kDsBytes;
  static constexpr int kOffLse = kOffStage + kStageBytes;  // stage i: lse [kBm], Delta [kBm]
  static constexpr int kOffPin = kOffLse + 4 * kBm * 4;    // [256 threads] x 4 B
  static constexpr int kOffBar = kOffPin + 256 * 4;        // mbarriers: Q/dO stage i landed
  static constexpr int kBytes = kOffBar + 2 * 8;
  static constexpr int kSmemBytes = kBytes + 1024;  // slack to align the base to 1024
  // dQ split over the two warpgroups.
  static constexpr int kDqN0 = kBm == 128 ? D : 64;
  static constexpr int kDqN1 = kBm == 128 ? D : D - 64;

  static_assert(kBn == 128, "two warpgroups of 64 keys");
  static_assert(kBm == 64 || kBm == 128, "query block");
  static_assert(kBm == 128 ? D == 64 : (D > 64 && D <= 128), "dQ split");
  static_assert(D % kStageCols == 0 && kStageBlockBytes % 1024 == 0, "dQ staging boxes");
  static_assert(kOffDs % 1024 == 0 && kOffStage % 1024 == 0, "swizzle atoms");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

// lse and Delta of rows [q0, q0 + BM) of head h (zeros past the end).
template <int BM>
__device__ __forceinline__ void load_rows_stats(uint32_t base, const fold_attn_problem_t &p,
                                                const float *lse, const float *delta,
                                                const Request &r, int64_t q0, int h) {
  // BM = 64: threads 64..127 (warps 2-3) take the rows, away from the TMA-issuing warps 0-1.
  const int first = BM == 64 ? (threadIdx.x + kThreads - 64) % kThreads : threadIdx.x;
  for (int i = first; i < BM; i += kThreads) {
    const bool valid = q0 + i < r.len;
    const int64_t row = static_cast<int64_t>(h) * p.total_tokens + r.first + q0 + i;
    cp_async4(base + 4u * i, valid ? lse + row : lse, valid);
    cp_async4(base + 4u * (BM + i), valid ? delta + row : delta, valid);
  }
}

// PINPF (the default; FOLD_BWD_VARIANT=pin0 gives the older form for A/B runs): as in
// backward_sm90_ws.cuh, P^T's A fragments are packed once, in front of dP^T's wait, and their
// XOR is the pin's word. The same values, the same bits.
// epi16 (default true; FOLD_BWD_VARIANT=epi0: false): the
// 16-byte epilogue of backward_sm90_epilogue.cuh, as in backward_sm90_ws.cuh. Same bits.
// WIN: the sliding window's instance (backward_window.cuh): the query blocks of a key block are
// those its window reaches, and a tile is masked wherever the band of visible diagonals cuts it.
// Without it (calls with no window), the code is the causal-only kernel's, unchanged.
template <int D, class Tag, bool PINPF = true, bool WIN = false>
__global__ void __launch_bounds__(kThreads, 1)
    backward_sm90_kernel(const fold_attn_problem_t p, const fold_tensor_t q, const fold_tensor_t k,
                         const fold_tensor_t v, const fold_tensor_t dout,
                         const float *__restrict__ lse, const float *__restrict__ delta,
                         const float *__restrict__ bounds,
                         const __grid_constant__ CUtensorMap dq_map,
                         const __grid_constant__ CUtensorMap tm_q,
                         const __grid_constant__ CUtensorMap tm_do, const QdoMuls muls,
                         const fold_tensor_t dk, const fold_tensor_t dv, uint32_t hb0,
                         uint32_t hb_end, uint32_t kb0, bool epi16) {
  using Cfg = Sm90Cfg<D>;
  using T = typename Tag::T;  // __nv_bfloat16 or __half
  constexpr int kBm = Cfg::kBm, kBn = Cfg::kBn;
  extern __shared__ unsigned char smem_raw[];
  // 128-byte swizzle atoms must start at 1024-byte aligned shared addresses.
  const uint32_t raw_addr = smem_addr(smem_raw);
  const uint32_t base = (raw_addr + 1023u) & ~1023u;
  unsigned char *const smem = smem_raw + (base - raw_addr);
  const uint32_t k_addr = base + Cfg::kOffK, v_addr = base + Cfg::kOffV;
  const uint32_t ds_addr = base + Cfg::kOffDs;
  int32_t *const staging = reinterpret_cast<int32_t *>(smem + Cfg::kOffStage);

  // grid (hb in the chunk, key block, chunk) over the work items (KV head x request `hb`, key
  // block), offset by (hb0, kb0) when the host splits a very large item space over several
  // launches of this same kernel (launch_sm90). The block scheduler dispatches x fastest, then
  // y, then z: chunk after chunk of gridDim.x consecutive hb, and inside a chunk every CTA of
  // key block 0 (the longest under causal masking) first, then block 1, ... (longest-first
  // per chunk, a short tail), while the CTAs resident at a time share few heads, so their Q,
  // dO and dQ grid rows stay in L2. One chunk of all hb is v1's order. Neither the order nor
  // the split changes a bit: dK/dV are summed inside the CTA, dQ with integer adds.
  const uint32_t hb = hb0 + blockIdx.z * gridDim.x + blockIdx.x;
  if (hb >= hb_end) return;  // the last chunk may be short
  const int b = static_cast<int>(hb / static_cast<uint32_t>(p.n_kv_heads));
  const int hk = static_cast<int>(hb % static_cast<uint32_t>(p.n_kv_heads));
  const Request r = request_of(p, b);
  const int64_t k0 = static_cast<int64_t>(kb0 + blockIdx.y) * kBn;
  if (k0 >= r.len) return;
  const int group = p.n_heads / p.n_kv_heads;
  const GridScale gs =
      grid_scale(bounds + (static_cast<int64_t>(b) * p.n_kv_heads + hk) * FOLD_BWD_BOUNDS, D);
  const float scale_log2 = p.softmax_scale * kLog2e;
  const float ds_scale = exp2i(gs.t);
  // The dQ partials' scale onto the grid, 2^(s - t): one multiply where 2^(s - t) is normal.
  const int dq_k = gs.s - gs.t;
  const bool dq_one_mul = dq_k >= -126 && dq_k <= 127;
  const float dq_mul = dq_one_mul ? exp2i(dq_k) : 1.0f;
  const int tid = threadIdx.x;
  // Known to the compiler as warp-uniform (a shuffle of lane 0's value), so the wgmma
  // descriptors derived from it live in uniform registers: tid >> 7 cost an R2UR chain in
  // front of every wgmma (D 128 kernel: 162 R2UR with tid >> 7, 9 with this).
  const int wg = hp::warpgroup_index();
  const int warp = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, tq = lane & 3;
  // The query blocks [q_begin, q_end) that see this key block.
  int64_t q_begin = p.causal ? (k0 / kBm) * kBm : 0;
  int32_t q_end = r.len;
  if constexpr (WIN) bwd::window_query_blocks<kBm>(p, k0, kBn, r.len, &q_begin, &q_end);

  const auto qdo_addr = [&](int stage) { return base + Cfg::kOffQdo + 2u * stage * Cfg::kQBytes; };
  const auto stats_addr = [&](int stage) { return base + Cfg::kOffLse + 8u * stage * kBm; };

  // Q and dO of a pair: one thread issues TMA tensor loads (kDBlocks 64-column panels each,
  // the swizzled layout load_tile_sw writes) completing on the stage's mbarrier. TMA reads
  // rows past the request's end from the next packed request (or zero-fills them past the
  // tensor); the consumers zero those rows after the wait (qdo_zero_tail), so they hold 0
  // as before. lse / Delta (zero-filled past the end) and K / V stay on cp.async.
  uint64_t *const qdo_full = reinterpret_cast<uint64_t *>(smem + Cfg::kOffBar);
  const bool dense = p.cu_seqlens == nullptr;
  const int32_t row_base = dense ? 0 : static_cast<int32_t>(r.first);
  const int32_t batch = dense ? b : 0;
  const auto issue_qdo = [&](int stage, int64_t q0, int h) {
    unsigned char *dst = smem + Cfg::kOffQdo + 2 * stage * Cfg::kQBytes;
    const int32_t row = row_base + static_cast<int32_t>(q0);
    hp::mbar_arrive_expect_tx(&qdo_full[stage], 2 * Cfg::kQBytes);
#pragma unroll
    for (int pn = 0; pn < Cfg::kDBlocks; ++pn) {
      hp::tma_load_4d(dst + pn * kBm * 128, &tm_q, &qdo_full[stage], pn * 64, h * muls.q_head, row,
                      batch * muls.q_batch);
      hp::tma_load_4d(dst + Cfg::kQBytes + pn * kBm * 128, &tm_do, &qdo_full[stage], pn * 64,
                      h * muls.do_head, row, batch * muls.do_batch);
    }
  };
  // Rows [len - q0, kBm) of the stage's Q and dO tiles := 0 (whole 128-byte rows, so the
  // swizzle does not matter), by all threads, after the stage's mbarrier wait.
  const auto qdo_zero_tail = [&](int stage, int64_t q0) {
    if (q0 + kBm <= r.len) return;
    const int valid = static_cast<int>(r.len - q0);
    const int chunks = (kBm - valid) * 8;  // 16-byte chunks per panel
    unsigned char *tile = smem + Cfg::kOffQdo + 2 * stage * Cfg::kQBytes;
    for (int i = tid; i < 2 * Cfg::kDBlocks * chunks; i += kThreads) {
      const int panel = i / chunks, c = i % chunks;  // panel: (tile, column block)
      *reinterpret_cast<uint4 *>(tile + panel * kBm * 128 + valid * 128 + c * 16) =
          make_uint4(0, 0, 0, 0);
    }
  };

  // K, V and the first pair's Q, dO, lse, Delta.
  if (tid == 0) {
    hp::mbar_init(&qdo_full[0], 1);
    hp::mbar_init(&qdo_full[1], 1);
    hp::fence_barrier_init();
    hp::tma_prefetch_descriptor(&tm_q);
    hp::tma_prefetch_descriptor(&tm_do);
    issue_qdo(0, q_begin, hk * group);
  }
  bwd::load_tile_sw<kBn, D, kThreads>(k_addr, p, k, b, r, k0, hk, threadIdx.x);
  bwd::load_tile_sw<kBn, D, kThreads>(v_addr, p, v, b, r, k0, hk, threadIdx.x);
  load_rows_stats<kBm>(stats_addr(0), p, lse, delta, r, q_begin, hk * group);
  cp_async_commit();
  __syncthreads();  // the mbarriers' initialisation, before anyone waits on them

  float dv_acc[D / 2], dk_acc[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dv_acc[i] = dk_acc[i] = 0.0f;

  // Descriptors that do not change over the pairs (k16 steps add (bytes >> 4) to them).
  const uint64_t k_desc_a = hp::desc_k_major_sw128(k_addr + wg * 64 * 128);  // K-major A
  const uint64_t v_desc_a = hp::desc_k_major_sw128(v_addr + wg * 64 * 128);
  uint64_t dq_desc_a, dq_desc_b;  // dS (MN-major A), K (MN-major B)
  if constexpr (kBm == 128) {
    dq_desc_a = hp::desc_mn_major_sw128(ds_addr + wg * kBn * 128, kBn * 128);
    dq_desc_b = hp::desc_mn_major_sw128(k_addr, kBn * 128);
  } else {
    dq_desc_a = hp::desc_mn_major_sw128(ds_addr, kBn * 128);
    dq_desc_b = hp::desc_mn_major_sw128(k_addr + wg * kBn * 128, kBn * 128);
  }
  const int dq_row0 = kBm == 128 ? 64 * wg : 0;
  const int dq_col0 = kBm == 128 ? 0 : 64 * wg;

  // This thread's key rows (tile-relative) in the accumulators: key_l and key_l + 8.
  const int key_l = 64 * wg + 16 * warp + g;

  // Step 5's bulk reduce of a pair is issued after the next pair's first barrier (or after
  // the loop, for the last pair): one barrier per pair serves both.
  const auto push_dq = [&](int h, int64_t q0) {
    if (tid == 0) {
#pragma unroll
      for (int cb = 0; cb < Cfg::kStageBlocks; ++cb)
        hp::tma_reduce_add_3d(&dq_map, smem + Cfg::kOffStage + cb * Cfg::kStageBlockBytes,
                              cb * Cfg::kStageCols, h, static_cast<int32_t>(r.first + q0));
      hp::bulk_commit();
    }
  };
  int stage = 0;
  uint32_t phases = 0;  // bit i: the parity the next wait on qdo_full[i] expects
  int prev_h = -1;      // the pair whose dQ partial waits in the staging tile (none yet)
  int64_t prev_q0 = 0;

  for (int h = hk * group; h < (hk + 1) * group; ++h) {
    for (int64_t q0 = q_begin; q0 < q_end; q0 += kBm, stage ^= 1) {
      // This pair's tiles have landed; every thread is done with the previous pair (its dS^T,
      // the other stage, the wgmma reads of both) and its dQ partial is in the staging tile.
      cp_async_wait_all();
      hp::mbar_wait(&qdo_full[stage], (phases >> stage) & 1u);
      phases ^= 1u << stage;
      qdo_zero_tail(stage, q0);
      hp::fence_proxy_async();
      __syncthreads();
      if (prev_h >= 0) push_dq(prev_h, prev_q0);
      prev_h = h;
      prev_q0 = q0;
      {
        int next_h = h;
        int64_t next_q0 = q0 + kBm;
        if (next_q0 >= q_end) {
          next_h = h + 1;
          next_q0 = q_begin;
        }
        if (next_h < (hk + 1) * group) {
          // The other stage is free: the previous pair's wgmmas that read it were retired
          // (step 4's wait) before the barrier above.
          // At Bm = 64, warp 1 issues them while warp 0 issues the previous pair's dQ push,
          // and the cp.async of lse / Delta go to warps 2-3: the issue work is spread over the
          // warps of warpgroup 0, whose wgmmas wait for all four (D 128: 4-13% faster in an
          // eager A/B; at Bm = 128, D 64, it was 4-6% slower, so thread 0 keeps it there).
          if (tid == (kBm == 64 ? 32 : 0)) issue_qdo(stage ^ 1, next_q0, next_h);
          load_rows_stats<kBm>(stats_addr(stage ^ 1), p, lse, delta, r, next_q0, next_h);
          cp_async_commit();
        }
      }
      const uint32_t q_addr = qdo_addr(stage), do_addr = q_addr + Cfg::kQBytes;
      const float *lse_s = reinterpret_cast<const float *>(smem + Cfg::kOffLse + 8 * stage * kBm);
      const float *delta_s = lse_s + kBm;

      // Steps 1-3 run per sub-block of 64 query rows (kBm / 64 of them): fewer live
      // registers for kBm = 128, and the dV/dK wgmmas of one sub-block overlap the next's
      // S/dP wgmmas. (Issuing dV's wgmmas right after P, before dS, and the last dK after
      // the dQ GEMM compiles without spills since the uniform descriptors, but measured no
      // faster: notes/training_kernels.md, session 7.)
#pragma unroll 1
      for (int sub = 0; sub < kBm / 64; ++sub) {
        const int r0 = 64 * sub;  // first row (tile-relative) of the sub-block
        // ---- 1. S^T = K_w Q^T, dP^T = V_w dO^T: [64 keys x 64 rows] per warpgroup.
        float s[32], dp[32];
        bwd::pair_s_dp<D, T, kBm, kBn>(s, dp, k_desc_a, v_desc_a, q_addr, do_addr, r0);

        uint32_t pf[4][4], df[4][4];  // P^T and dS^T as A fragments (step 3)
        // ---- 2. P^T and dS^T 2^t in place, masked where needed (backward_sm90_pair.cuh).
        bwd::pair_p_ds<Tag, WIN, PINPF>(
            s, dp, pf, p, r.len, q0, k0, r0, wg, key_l, tq, lse_s, delta_s, scale_log2, ds_scale,
            [&] { return reinterpret_cast<uint32_t *>(smem + Cfg::kOffPin + tid * 4); });
        bwd::pair_fragments<Tag, PINPF>(s, dp, pf, df);
        bwd::pair_store_ds<kBn>(ds_addr, sub, wg, warp, lane, df);

        // ---- 3. dV += P^T dO, dK += dS^T Q (B: dO, Q MN-major, column blocks kBm * 128
        // apart; the k16 step kk of the sub-block starts at row r0 + 16 kk).
        hp::fence();
        bwd::pair_dv_dk<D, T, kBm>(dv_acc, dk_acc, pf, df, q_addr, do_addr, r0);
      }
      hp::fence_proxy_async();  // dS^T (generic stores) -> step 4's wgmma (async proxy)
      // The previous pair's bulk reduce (issued at this pair's first barrier) has read the
      // staging tile; both halves of dS^T are in.
      if (tid == 0) hp::bulk_wait_read<0>();
      __syncthreads();

      // ---- 4. dQ partial = dS K over the block's 128 keys; 5. onto the integer grid.
      const auto dq_pass = [&](auto n_tag) {
        constexpr int kN = decltype(n_tag)::value;
        float acc[kN / 2];
        hp::fence();
#pragma unroll
        for (int ks = 0; ks < kBn / 16; ++ks)
          hp::wgmma_ss<kN, T, 1, 1>(acc, dq_desc_a + ks * 128, dq_desc_b + ks * 128, ks > 0);
        hp::commit();
        hp::wait<0>();  // (also retires step 3)
        hp::fence_operands(acc);
        hp::fence_operands(dv_acc);
        hp::fence_operands(dk_acc);
        bwd::dq_onto_grid<kN, kBm>(acc, staging, dq_row0, dq_col0, warp, g, tq, dq_one_mul, dq_mul,
                                   dq_k);
      };
      if (wg == 0)
        dq_pass(std::integral_constant<int, Cfg::kDqN0>{});
      else
        dq_pass(std::integral_constant<int, Cfg::kDqN1>{});
      hp::fence_proxy_async();  // staging (generic stores) -> the bulk reduce (async proxy)
    }
  }
  __syncthreads();
  push_dq(prev_h, prev_q0);
  if (tid == 0) hp::bulk_wait<0>();

  // ---- Epilogue: the warpgroup's 64 keys of dK and dV.
  const float dk_unscale = exp2i(-gs.t);
  if (epi16) {
    // Each warp stages its 16 keys' dK rows in the same lines of K and their dV rows in those of
    // V (lines line0 .. line0 + 15, every column block). Free here: every thread retired all
    // its wgmmas (step 4's wait<0> of the last pair, which also retires step 3) and executed the
    // fence.proxy.async behind its last dQ conversion before the __syncthreads above, so no
    // wgmma reads K or V any more and those async-proxy reads are ordered before the generic
    // stmatrix writes below. K and V are written only by the load before the loop (waited at
    // the top of the first pair); nothing is loaded after the last pair; the bulk reduce issued
    // above reads only the staging tile. A warp touches only its own lines: __syncwarp orders
    // the stmatrix before the other lanes' loads.
    const int line0 = 64 * wg + 16 * warp;
    const int64_t key0 = k0 + line0;
    const int64_t left = r.len - key0;
    if (left <= 0) return;
    const int n_rows = left < 16 ? static_cast<int>(left) : 16;
    // Row i of the warp at element_offset(.., key0 + i, ..) = element_offset(.., key0, ..) + i
    // token_stride (dense and packed alike).
    T *const dk_rows = static_cast<T *>(dk.data) + element_offset(p, dk, b, r, key0, hk);
    T *const dv_rows = static_cast<T *>(dv.data) + element_offset(p, dv, b, r, key0, hk);
    bwd::stage_dk_rows<D, kBn, Tag>(k_addr, line0, lane, dk_acc, gs.valid, dk_unscale,
                                    p.softmax_scale);
    bwd::stage_warp_rows<D, kBn, Tag>(v_addr, line0, lane, dv_acc, [](float a) { return a; });
    __syncwarp();
    bwd::store_warp_rows<D, kBn>(k_addr, line0, lane, n_rows, dk_rows, dk.token_stride);
    bwd::store_warp_rows<D, kBn>(v_addr, line0, lane, n_rows, dv_rows, dv.token_stride);
    return;
  }
  bwd::store_dk_dv_direct<D, Tag>(p, dk, dv, b, r, k0, key_l, hk, tq, dk_acc, dv_acc, gs.valid,
                                  dk_unscale);
}

void check(cudaError_t err, const char *what) {
  if (err != cudaSuccess) fail(FOLD_ERR_CUDA, std::string(what) + ": " + cudaGetErrorString(err));
}

// The main kernel instance of a variant, with or without the sliding window (WIN).
template <int D, class Tag, bool WIN>
auto main_kernel(bool ws, bool dq_first, bool pin_pf) {
  return !ws         ? (pin_pf ? backward_sm90_kernel<D, Tag, true, WIN>
                               : backward_sm90_kernel<D, Tag, false, WIN>)
         : !dq_first ? bwd::backward_ws_kernel<D, Tag, false, true, WIN>
         : pin_pf    ? bwd::backward_ws_kernel<D, Tag, true, true, WIN>
                     : bwd::backward_ws_kernel<D, Tag, true, false, WIN>;
}

template <int D, class Tag>
void launch_sm90(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k, fold_tensor_t v,
                 fold_tensor_t dout, const float *lse, const float *delta, const float *bounds,
                 int32_t *dq_grid, fold_tensor_t dk, fold_tensor_t dv, bool v1_order, bool ws,
                 bool dq_first, bool pin_pf, bool epi16, bool window, cudaStream_t stream) {
  using Cfg = Sm90Cfg<D>;
  // The windowed instances exactly when the call's window can cut (backward_window.cuh: a
  // property of the call, not of the batch).
  auto kernel = window ? main_kernel<D, Tag, true>(ws, dq_first, pin_pf)
                       : main_kernel<D, Tag, false>(ws, dq_first, pin_pf);
  const int threads = ws ? bwd::kWsThreads : kThreads;
  const int smem_bytes = ws ? bwd::WsCfg<D>::kSmemBytes : Cfg::kSmemBytes;
  set_max_dynamic_smem(reinterpret_cast<const void *>(kernel), smem_bytes,
                       ws ? "backward_ws" : "backward_sm90");
  // Work items: (KV head x request, key block), in chunks of KV head x request whose key
  // blocks are scheduled together (see the kernel): about two waves of CTAs per chunk (enough
  // for longest-first to balance the causal triangle) and few heads resident at a time (L2
  // reuse of Q, dO and the dQ grid rows). The chunk size is balanced: only the last chunk
  // may be short, by fewer hb than there are chunks (those CTAs return at once).
  // FOLD_BWD_VARIANT=v1: v1's order (one chunk); FOLD_BWD_HB_CHUNK=n sets the target chunk
  // (for sweeps on the GPU). Scheduling only: the bits are the same for every choice.
  // With a sliding window, a key block's query blocks number about (window + block) / kBm
  // whatever its index, save the first or last few (shorter): key block 0 first is then no
  // longer strictly longest-first, but the work per CTA is nearly even and the order changes
  // no bit.
  const int64_t n_hb = static_cast<int64_t>(p.n_kv_heads) * p.batch;
  const int64_t n_kb = (static_cast<int64_t>(p.seqlen) + Cfg::kBn - 1) / Cfg::kBn;
  if (n_hb == 0 || n_kb == 0) return;
  int64_t target = (2 * sm_count() + n_kb - 1) / n_kb;
  // Non-causal calls take chunks of at most 4 KV head x request where that measured faster.
  // Smaller chunks keep more of a head's key blocks resident together, so the Q / dO rows and
  // the int32 dQ grid rows they all walk leave L2 fewer times (ncu, H100, varlen mix: DRAM
  // read 6.9 -> 2.9 GB, written 3.7 -> 1.6 GB), while more CTAs reduce-add into the same dQ
  // lines at once; which side wins depends on the shape and the device's DRAM bandwidth:
  // - at most 16 key blocks (S <= 2048): +2.1-3.0% at (8, 2048, 16/16, 128) and (16, 1024,
  //   32/8, 128) full on an H200, +1.0% and +5.9-6.9% on an H100, +0.4% at (8, 2048, 32/32,
  //   64) full;
  // - packed (varlen) requests on devices below 4.2 TB/s of DRAM bandwidth (H100 class): the
  //   varlen mix full +12-14% on an H100. On an H200 (4.8 TB/s) the mix measured 0.985-1.007
  //   with chunks of 2-8, and dense S 4096 / 8192 (like packed requests of equal length) lost
  //   2-7% with small chunks, so faster devices keep the two-wave target; on an H100 those
  //   dense shapes measured -3.6% to +1.4%.
  // Causal shapes keep the two-wave target (up to 5% lost with small chunks). Scheduling only.
  // FOLD_BWD_CHUNK_RULE=0 (read per call) keeps the two-wave target everywhere, for A/B runs.
  // (A device of unknown bandwidth keeps the two-wave target for packed calls.)
  const char *rule = std::getenv("FOLD_BWD_CHUNK_RULE");
  const auto slow_dram = [] {
    const double rate = dram_bytes_per_second();
    return rate > 0 && rate < 4.2e12;
  };
  if (!p.causal && (rule == nullptr || std::strcmp(rule, "0") != 0) &&
      (n_kb <= 16 || (p.cu_seqlens != nullptr && slow_dram())))
    target = std::min<int64_t>(target, 4);
  if (const char *env = std::getenv("FOLD_BWD_HB_CHUNK"); env != nullptr && std::atoll(env) > 0)
    target = std::atoll(env);
  if (v1_order) target = n_hb;
  // Grid limits: x < 2^31, y and z <= 65535; a larger item space runs as several launches of
  // the same kernel, so every batch size takes this path.
  constexpr int64_t kMaxX = 0x7fffffff, kMaxYZ = 65535;
  target = std::clamp<int64_t>(target, 1, std::min(n_hb, kMaxX));
  const int64_t n_chunks = (n_hb + target - 1) / target;
  const int64_t chunk = (n_hb + n_chunks - 1) / n_chunks;  // <= target
  // The int32 dQ grid [total_tokens][n_heads][D] as a 3-D TMA map (innermost first) with the
  // staging tile's box {32 columns, 1 head, kBm rows}, 128-byte swizzle (step 5's reduce-add).
  const uint64_t grid_dims[3] = {static_cast<uint64_t>(D), static_cast<uint64_t>(p.n_heads),
                                 static_cast<uint64_t>(p.total_tokens)};
  const uint64_t grid_strides[2] = {static_cast<uint64_t>(D) * 4,
                                    static_cast<uint64_t>(p.n_heads) * D * 4};
  // The warp-specialised kernel pushes each consumer's half on its own: 64-row boxes.
  const uint32_t grid_box[3] = {Cfg::kStageCols, 1,
                                static_cast<uint32_t>(ws ? bwd::kWsPushRows : Cfg::kBm)};
  const CUtensorMap dq_map = encode_tiled(dq_grid, CU_TENSOR_MAP_DATA_TYPE_INT32, 3, grid_dims,
                                          grid_strides, grid_box, CU_TENSOR_MAP_SWIZZLE_128B);
  const ViewMap mq = make_view_map(p, q, p.n_heads, Cfg::kBm);
  const ViewMap mdo = make_view_map(p, dout, p.n_heads, Cfg::kBm);
  const QdoMuls muls{mq.head_mul, mq.batch_mul, mdo.head_mul, mdo.batch_mul};
  for (int64_t kb0 = 0; kb0 < n_kb; kb0 += kMaxYZ)
    for (int64_t hb0 = 0; hb0 < n_hb; hb0 += chunk * kMaxYZ) {
      const int64_t hb_end = std::min(n_hb, hb0 + chunk * kMaxYZ);
      const dim3 grid(static_cast<unsigned>(chunk),
                      static_cast<unsigned>(std::min(n_kb - kb0, kMaxYZ)),
                      static_cast<unsigned>((hb_end - hb0 + chunk - 1) / chunk));
      kernel<<<grid, threads, smem_bytes, stream>>>(
          p, q, k, v, dout, lse, delta, bounds, dq_map, mq.map, mdo.map, muls, dk, dv,
          static_cast<uint32_t>(hb0), static_cast<uint32_t>(hb_end), static_cast<uint32_t>(kb0),
          epi16);
      check(cudaGetLastError(), ws ? "backward_ws_kernel launch" : "backward_sm90_kernel launch");
    }
}

// Whether the warp-specialised kernel can run here. Its register hand-off (setmaxnreg: producer
// 24, consumers 240) draws on the pool the CTA got at launch, so that pool must hold 128 x 24 +
// 256 x 240: with fewer registers (another ptxas, a -maxrregcount) the consumers' setmaxnreg.inc
// would wait forever. Its producer also forms int32 row coordinates up to 256 past a request's
// rows. Either way the synchronous kernel runs instead (same bits). WIN: the windowed instance's
// pool (its own compilation).
template <int D, class Tag, bool WIN>
bool ws_usable(const fold_attn_problem_t &p) {
  static const bool regs_ok = [] {
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, bwd::backward_ws_kernel<D, Tag, true, true, WIN>) !=
        cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return attr.numRegs * bwd::kWsThreads >=
           128 * bwd::kWsProducerRegs + 256 * bwd::kWsConsumerRegs;
  }();
  return regs_ok && p.total_tokens <= 0x7fffffff - 256;
}

// Whether every row of t (D 16-bit elements at element_offset(p, t, ...)) starts 16-byte aligned,
// as the 16-byte epilogue stores need. The C entry point already refuses other views
// (training_cuda.cpp check_cuda_view); this keeps the stores safe should a caller of the launcher
// ever skip that check.
bool rows_16b_aligned(const fold_attn_problem_t &p, const fold_tensor_t &t) {
  const bool dense = p.cu_seqlens == nullptr;
  return reinterpret_cast<uintptr_t>(t.data) % 16 == 0 && t.token_stride % 8 == 0 &&
         t.head_stride % 8 == 0 && (!dense || t.batch_stride % 8 == 0);
}

// FOLD_BWD_VARIANT (read at every call): "v1" = v1's order (one chunk of all hb), anything
// else = v1.1's chunked order (the default); "ws" / "sync" pick the main kernel (below). Same
// bits for every value.
template <int D, class Tag>
void launch_sm90_variant(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k,
                         fold_tensor_t v, fold_tensor_t dout, const float *lse, const float *delta,
                         const float *bounds, int32_t *dq_grid, fold_tensor_t dk, fold_tensor_t dv,
                         cudaStream_t stream) {
  const char *env = std::getenv("FOLD_BWD_VARIANT");
  const std::string var = env != nullptr ? env : "";
  const bool v1_order = var == "v1";
  // The warp-specialised kernel by default where it measured faster (Bm = 64: D 96 / 128;
  // notes/training_kernels.md, session 11), the CTA-synchronous one at D 64 (Bm = 128).
  // "ws" / "sync" force one of them (A/B runs, tests). Same bits either way.
  // "wsd": ws with dV / dK issued before the dQ product (the order before session 16; same bits).
  // "pin0": the default's kernel with P packed twice (the pin's form before session 17; same bits).
  // "epi0": the default's kernel with dK / dV stored from the accumulators, 4 bytes at a time
  // (the older epilogue; same bits; also for rows not 16-byte aligned, which the C entry point
  // refuses before this).
  // Every variant has a windowed instance (the same choices apply to windowed calls).
  const bool window = window_may_mask(p);
  const bool ws = (var == "ws" || var == "wsd" || (var != "sync" && Sm90Cfg<D>::kBm == 64)) &&
                  (window ? ws_usable<D, Tag, true>(p) : ws_usable<D, Tag, false>(p));
  const bool epi16 = var != "epi0" && rows_16b_aligned(p, dk) && rows_16b_aligned(p, dv);
  launch_sm90<D, Tag>(p, q, k, v, dout, lse, delta, bounds, dq_grid, dk, dv, v1_order, ws,
                      var != "wsd", var != "pin0", epi16, window, stream);
}

template <class Tag>
bool launch_sm90_dim(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k,
                     fold_tensor_t v, fold_tensor_t dout, const float *lse, const float *delta,
                     const float *bounds, int32_t *dq_grid, fold_tensor_t dk, fold_tensor_t dv,
                     cudaStream_t stream) {
  switch (p.head_dim) {
    case 64:
      launch_sm90_variant<64, Tag>(p, q, k, v, dout, lse, delta, bounds, dq_grid, dk, dv, stream);
      return true;
    case 96:
      launch_sm90_variant<96, Tag>(p, q, k, v, dout, lse, delta, bounds, dq_grid, dk, dv, stream);
      return true;
    case 128:
      launch_sm90_variant<128, Tag>(p, q, k, v, dout, lse, delta, bounds, dq_grid, dk, dv, stream);
      return true;
    default:
      return false;
  }
}

}  // namespace

bool launch_backward_main_sm90(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k,
                               fold_tensor_t v, fold_tensor_t dout, const float *lse,
                               const float *delta, const float *bounds, int32_t *dq_grid,
                               fold_tensor_t dk, fold_tensor_t dv, void *stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  if (p.head_dim != 64 && p.head_dim != 96 && p.head_dim != 128) return false;
  // Q and dO load by TMA: views it cannot describe (tma_describable: a token stride of 0, a
  // base not 16-byte aligned, strides not multiples of 8 elements) take v0's main kernel,
  // decided by the layout alone (never by the batch), as in the forward.
  if (!tma_describable(p, q) || !tma_describable(p, dout)) return false;
  // TMA coordinates (Q / dO rows, dQ grid rows) are signed 32-bit.
  if (p.total_tokens > 0x7fffffff)
    fail(FOLD_ERR_UNSUPPORTED, "total_tokens must be < 2^31 on CUDA");
  if (p.dtype == FOLD_DTYPE_BF16)
    return launch_sm90_dim<tile::Bf16>(p, q, k, v, dout, lse, delta, bounds, dq_grid, dk, dv,
                                       stream);
  return launch_sm90_dim<tile::F16>(p, q, k, v, dout, lse, delta, bounds, dq_grid, dk, dv, stream);
}

}  // namespace fold::cuda
