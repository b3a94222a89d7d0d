// Deterministic training backward, main kernel, warp-specialised (sm_90a): the arithmetic of
// backward_sm90.cu's kernel (same wgmmas in the same order, same roundings: the same bits),
// with a producer warpgroup that takes every load and the dQ push off the two consumer
// warpgroups, so that they no longer meet at a CTA barrier at the top of every pair.
//
// 384 threads. Warpgroup 0, producer (setmaxnreg.dec 24):
//   warp 0: per (query head, query block) pair, Q and dO by TMA and lse / Delta by cp.async
//     into one of two stages (full[s]: 1 expect-tx arrival + 32 cp.async arrivals), after
//     both consumers released the stage (empty[s], 256 arrivals);
//   warps 1 and 2: the dQ partials of consumer 0 and 1: when the consumer's half of the
//     staging tile is written (named barrier kBarFull + c), TMA reduce-adds of its column
//     blocks (Bm = 64) or rows (Bm = 128) into the int32 grid; once the bulk copy has read
//     the tile, the consumer may write it again (kBarEmpty + c).
// Warpgroups 1 and 2, consumers c = 0, 1 (setmaxnreg.inc 240): K and V of the block first
// (cp.async, zeros past the request's end), then keys 64 c .. 64 c + 63, their dK and dV. Per pair:
// S^T, dP^T, P, dS^T (as backward_sm90.cu), dS^T into one of two shared buffers; the only meeting
// point of the two consumers is the named barrier that says both halves of dS^T are in
// (kBarCons), before each issues its part of the dQ partial and then dV / dK (DQF, below). With two
// dS^T buffers, one consumer may run the next pair's S^T / dP^T while the other is still in its dQ
// product, so the tensor cores see one consumer's wgmmas while the other does its exponentials and
// conversions. Invariance and determinism are those of backward_sm90.cu: nothing here depends on
// the batch or on timing; dQ is summed with integer adds.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/float_bits.h"
#include "core/grid_scale.h"
#include "core/problem.h"
#include "core/tile_plan.h"
#include "cuda/backward_sm90_epilogue.cuh"
#include "cuda/backward_sm90_pair.cuh"
#include "cuda/backward_sm90_tiles.cuh"
#include "cuda/backward_window.cuh"
#include "cuda/hopper/mbarrier.cuh"
#include "cuda/hopper/stmatrix.cuh"
#include "cuda/hopper/tma.cuh"
#include "cuda/hopper/warpgroup.cuh"
#include "cuda/hopper/wgmma.cuh"
#include "cuda/tile_mma.cuh"

namespace fold::cuda::bwd {

constexpr int kWsThreads = 384;
constexpr int kWsProducerRegs = 24;
constexpr int kWsConsumerRegs = 240;  // 128 x 24 + 256 x 240 = 64512 = 384 x 168
// Named barriers (0 is __syncthreads, used only before the roles split).
constexpr int kBarCons = 1;      // the 256 consumer threads: both halves of dS^T are in
constexpr int kBarFull = 2;      // + c: consumer c's staging half written (128 + 32 threads)
constexpr int kBarEmpty = 4;     // + c: consumer c's staging half read by the bulk copy
constexpr int kWsPushRows = 64;  // rows of the dQ push's TMA box

template <int D>
struct WsCfg {
  static constexpr int kBm = backward_plan(D).block_m;
  static constexpr int kBn = backward_plan(D).block_n;
  static constexpr int kDBlocks = (D + 63) / 64;
  static constexpr int kKBytes = kDBlocks * kBn * 128;
  static constexpr int kQBytes = kDBlocks * kBm * 128;
  static constexpr int kDsBytes = (kBm / 64) * kBn * 128;  // one dS^T buffer
  static constexpr int kStageCols = 32;
  static constexpr int kStageBlocks = D / kStageCols;
  static constexpr int kStageBlockBytes = kBm * kStageCols * 4;
  static constexpr int kStageBytes = kStageBlocks * kStageBlockBytes;
  static constexpr int kOffK = 0;
  static constexpr int kOffV = kKBytes;
  static constexpr int kOffQdo = 2 * kKBytes;           // stage i: Q at + 2 i kQBytes, dO after it
  static constexpr int kOffDs = kOffQdo + 4 * kQBytes;  // buffer i at + i kDsBytes
  static constexpr int kOffStage = kOffDs + 2 * kDsBytes;
  static constexpr int kOffLse = kOffStage + kStageBytes;  // stage i: lse [kBm], Delta [kBm]
  static constexpr int kOffPin = kOffLse + 4 * kBm * 4;    // [256 consumer threads] x 4 B
  static constexpr int kOffBar = kOffPin + 256 * 4;        // full[2], empty[2]
  static constexpr int kBytes = kOffBar + 4 * 8;
  static constexpr int kSmemBytes = kBytes + 1024;
  static constexpr int kDqN0 = kBm == 128 ? D : 64;
  static constexpr int kDqN1 = kBm == 128 ? D : D - 64;

  static_assert(kBn == 128, "two consumer warpgroups of 64 keys");
  static_assert(kBm == 64 || kBm == 128, "query block");
  static_assert(kBm == 128 ? D == 64 : (D > 64 && D <= 128), "dQ split");
  static_assert(D % kStageCols == 0 && kStageBlockBytes % 1024 == 0, "dQ staging boxes");
  static_assert(kOffDs % 1024 == 0 && kOffStage % 1024 == 0 && kDsBytes % 1024 == 0,
                "swizzle atoms");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

// DQF (the default; FOLD_BWD_VARIANT=wsd gives the older order for A/B runs), Bm = 64 only: per
// pair, the dQ product is issued right after the dS^T barrier and dV / dK after it, so that the
// dQ conversion into the staging tile overlaps dV / dK on the tensor cores (wait<1> returns with
// dQ: groups retire in order); the stage is released once dV / dK retire. Same wgmmas, same bits.
// (Measured +4.5-9% on the D 128 protocol shapes, notes/training_kernels.md, session 16.)
//
// PINPF (the default; FOLD_BWD_VARIANT=pin0 gives the older form for A/B runs): P^T's A
// fragments are packed in front of dP^T's wait and their XOR is the pin's word, instead of the
// pin packing P once for its XOR and the fragments packing it again after the wait (ptxas did
// not merge the two: the masked and unmasked paths meet in between). 16 conversions fewer per
// thread and pair; the same values, the same bits.
//
// epi16 (a kernel argument, true by default; FOLD_BWD_VARIANT=epi0 gives the older epilogue for
// A/B runs, and so does a dK / dV view whose rows are not 16-byte aligned): dK and dV leave
// through shared memory with 16-byte stores (backward_sm90_epilogue.cuh) instead of 4-byte stores
// straight from the accumulators. The same values at the same addresses.
//
// WIN: the sliding window's instance (backward_window.cuh, as backward_sm90.cu's kernel): the
// producer's loads, the dQ pushes and the consumers' pairs all run over the query blocks
// [q_begin, q_end) its window reaches (one range, item(), so their counts and the stage parities
// agree), and a tile is masked wherever the band of visible diagonals cuts it. Without it (calls
// with no window), the code is the causal-only kernel's, unchanged.
template <int D, class Tag, bool DQF = true, bool PINPF = true, bool WIN = false>
__global__ void __launch_bounds__(kWsThreads, 1)
    backward_ws_kernel(const fold_attn_problem_t p, const fold_tensor_t q, const fold_tensor_t k,
                       const fold_tensor_t v, const fold_tensor_t dout,
                       const float *__restrict__ lse, const float *__restrict__ delta,
                       const float *__restrict__ bounds, const __grid_constant__ CUtensorMap dq_map,
                       const __grid_constant__ CUtensorMap tm_q,
                       const __grid_constant__ CUtensorMap tm_do, const QdoMuls muls,
                       const fold_tensor_t dk, const fold_tensor_t dv, uint32_t hb0,
                       uint32_t hb_end, uint32_t kb0, bool epi16) {
  namespace hp = hopper;
  using Cfg = WsCfg<D>;
  using T = typename Tag::T;
  constexpr int kBm = Cfg::kBm, kBn = Cfg::kBn;
  constexpr bool kDqFirst = DQF && kBm == 64;
  constexpr float kLog2e = 1.4426950408889634f;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw_addr = tile::smem_addr(smem_raw);
  const uint32_t base = (raw_addr + 1023u) & ~1023u;
  unsigned char *const smem = smem_raw + (base - raw_addr);
  const uint32_t k_addr = base + Cfg::kOffK, v_addr = base + Cfg::kOffV;

  // The work item, as backward_sm90_kernel (same grid, same order). Each role derives it
  // again after the split (item()): values live across setmaxnreg.dec must fit the
  // producer's registers, and ptxas spilled them when they were kept.
  const auto item_hb = [&] { return hb0 + blockIdx.z * gridDim.x + blockIdx.x; };
  const auto item_k0 = [&] { return static_cast<int64_t>(kb0 + blockIdx.y) * kBn; };
  {
    const uint32_t hb = item_hb();
    if (hb >= hb_end) return;
    if (item_k0() >= request_of(p, static_cast<int>(hb / static_cast<uint32_t>(p.n_kv_heads))).len)
      return;
  }
  const int tid = threadIdx.x;
  uint64_t *const full = reinterpret_cast<uint64_t *>(smem + Cfg::kOffBar);
  uint64_t *const empty = full + 2;
  if (tid == 0) {
    hp::mbar_init(&full[0], 1 + 32);
    hp::mbar_init(&full[1], 1 + 32);
    hp::mbar_init(&empty[0], 256);
    hp::mbar_init(&empty[1], 256);
    hp::fence_barrier_init();
  }
  __syncthreads();
  const int wg = hp::warpgroup_index();
  const auto item = [&] {
    struct {
      int b, hk, group;
      Request r;
      int64_t k0, q_begin;
      int32_t q_end;  // the key block's query blocks: [q_begin, q_end)
    } it;
    const uint32_t hb = item_hb();
    it.b = static_cast<int>(hb / static_cast<uint32_t>(p.n_kv_heads));
    it.hk = static_cast<int>(hb % static_cast<uint32_t>(p.n_kv_heads));
    it.group = p.n_heads / p.n_kv_heads;
    it.r = request_of(p, it.b);
    it.k0 = item_k0();
    it.q_begin = p.causal ? (it.k0 / kBm) * kBm : 0;
    it.q_end = it.r.len;
    if constexpr (WIN) window_query_blocks<kBm>(p, it.k0, kBn, it.r.len, &it.q_begin, &it.q_end);
    return it;
  };

  if (wg == 0) {
    // ================================ producer ================================
    hp::setmaxnreg_dec<kWsProducerRegs>();
    const auto it = item();
    const int b = it.b, hk = it.hk, group = it.group;
    const Request r = it.r;
    const int64_t k0 = it.k0, q_begin = it.q_begin;
    const int32_t q_end = it.q_end;
    const int warp = tid >> 5, lane = tid & 31;
    if (warp == 0) {
      const bool dense = p.cu_seqlens == nullptr;
      const int32_t row_base = dense ? 0 : static_cast<int32_t>(r.first);
      const int32_t batch = dense ? b : 0;
      if (lane == 0) {
        hp::tma_prefetch_descriptor(&tm_q);
        hp::tma_prefetch_descriptor(&tm_do);
      }
      // 32-bit request coordinates and per-head bases keep the loop in the producer's 24
      // registers (int64 ones spilled).
      const int32_t len = r.len, qb = static_cast<int32_t>(q_begin);
      const int32_t bq = batch * muls.q_batch, bd = batch * muls.do_batch;
      int stage = 0, n = 0;
      uint32_t phases = 0;  // bit s: the parity the next wait on empty[s] expects
      for (int h = hk * group; h < (hk + 1) * group; ++h) {
        const int64_t head_row = static_cast<int64_t>(h) * p.total_tokens + r.first;
        const float *lse_h = lse + head_row, *delta_h = delta + head_row;
        for (int32_t q0 = qb; q0 < q_end; q0 += kBm, stage ^= 1, ++n) {
          if (n >= 2) {
            hp::mbar_wait(&empty[stage], (phases >> stage) & 1u);
            phases ^= 1u << stage;
          }
          if (lane == 0) {
            unsigned char *dst = smem + Cfg::kOffQdo + 2 * stage * Cfg::kQBytes;
            const int32_t row = row_base + q0;
            hp::mbar_arrive_expect_tx(&full[stage], 2 * Cfg::kQBytes);
#pragma unroll
            for (int pn = 0; pn < Cfg::kDBlocks; ++pn) {
              hp::tma_load_4d(dst + pn * kBm * 128, &tm_q, &full[stage], pn * 64, h * muls.q_head,
                              row, bq);
              hp::tma_load_4d(dst + Cfg::kQBytes + pn * kBm * 128, &tm_do, &full[stage], pn * 64,
                              h * muls.do_head, row, bd);
            }
          }
          // lse and Delta of the pair's rows (zeros past the request's end; rows of the request
          // past q_end are loaded: the window masks them, as the CPU reference's tile holds them).
          const uint32_t st = base + Cfg::kOffLse + 8u * stage * kBm;
#pragma unroll
          for (int i = lane; i < kBm; i += 32) {
            const bool valid = q0 + i < len;
            cp_async4(st + 4u * i, valid ? lse_h + q0 + i : lse, valid);
            cp_async4(st + 4u * (kBm + i), valid ? delta_h + q0 + i : delta, valid);
          }
          tile::cp_async_commit();
          cp_async_mbar_arrive_noinc(hp::smem_u32(&full[stage]));
        }
      }
    } else if (warp <= 2) {
      // The dQ push of consumer c = warp - 1.
      const int c = warp - 1;
      // The pairs the consumers run (and the producer loads): the last one waits for its
      // reduce to complete and leaves the staging half taken.
      const int pairs = group * static_cast<int>((q_end - q_begin + kBm - 1) / kBm);
      hp::named_bar_arrive(kBarEmpty + c, 128 + 32);  // the staging half starts free
      int n = 0;
      for (int h = hk * group; h < (hk + 1) * group; ++h) {
        for (int64_t q0 = q_begin; q0 < q_end; q0 += kBm, ++n) {
          hp::named_bar_sync(kBarFull + c, 128 + 32);
          if (lane == 0) {
            const int32_t row = static_cast<int32_t>(r.first + q0);
            if constexpr (kBm == 128) {
              // Rows 64 c .. 64 c + 63 of every column block.
#pragma unroll
              for (int cb = 0; cb < Cfg::kStageBlocks; ++cb)
                hp::tma_reduce_add_3d(
                    &dq_map, smem + Cfg::kOffStage + cb * Cfg::kStageBlockBytes + c * 64 * 128,
                    cb * Cfg::kStageCols, h, row + 64 * c);
            } else {
              // Columns 64 c .. 64 c + kDqN - 1: column blocks 2 c .. .
              const int cb_end = c == 0 ? Cfg::kDqN0 / 32 : 2 + Cfg::kDqN1 / 32;
              for (int cb = 2 * c; cb < cb_end; ++cb)
                hp::tma_reduce_add_3d(&dq_map, smem + Cfg::kOffStage + cb * Cfg::kStageBlockBytes,
                                      cb * Cfg::kStageCols, h, row);
            }
            hp::bulk_commit();
            if (n + 1 < pairs)
              hp::bulk_wait_read<0>();
            else
              hp::bulk_wait<0>();
          }
          __syncwarp();
          if (n + 1 < pairs) hp::named_bar_arrive(kBarEmpty + c, 128 + 32);
        }
      }
    }
    tile::cp_async_wait_all();  // no thread leaves with its copies in flight
    return;
  }

  // ================================ consumers ================================
  hp::setmaxnreg_inc<kWsConsumerRegs>();
  const auto it = item();
  const int b = it.b, hk = it.hk, group = it.group;
  const Request r = it.r;
  const int64_t k0 = it.k0, q_begin = it.q_begin;
  const int32_t q_end = it.q_end;
  const int c = wg - 1;
  const int ctid = tid - 128;  // 0 .. 255
  const GridScale gs =
      grid_scale(bounds + (static_cast<int64_t>(b) * p.n_kv_heads + hk) * FOLD_BWD_BOUNDS, D);
  const float scale_log2 = p.softmax_scale * kLog2e;
  const float ds_scale = exp2i(gs.t);
  const int dq_k = gs.s - gs.t;
  const bool dq_one_mul = dq_k >= -126 && dq_k <= 127;
  const float dq_mul = dq_one_mul ? exp2i(dq_k) : 1.0f;
  const int warp = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, tq = lane & 3;
  int32_t *const staging = reinterpret_cast<int32_t *>(smem + Cfg::kOffStage);

  float dv_acc[D / 2], dk_acc[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dv_acc[i] = dk_acc[i] = 0.0f;

  const uint64_t k_desc_a = hp::desc_k_major_sw128(k_addr + c * 64 * 128);
  const uint64_t v_desc_a = hp::desc_k_major_sw128(v_addr + c * 64 * 128);
  const uint32_t ds_base = base + Cfg::kOffDs;
  uint64_t dq_desc_a, dq_desc_b;  // for dS^T buffer 0 (buffer 1: + kDsBytes >> 4)
  if constexpr (kBm == 128) {
    dq_desc_a = hp::desc_mn_major_sw128(ds_base + c * kBn * 128, kBn * 128);
    dq_desc_b = hp::desc_mn_major_sw128(k_addr, kBn * 128);
  } else {
    dq_desc_a = hp::desc_mn_major_sw128(ds_base, kBn * 128);
    dq_desc_b = hp::desc_mn_major_sw128(k_addr + c * kBn * 128, kBn * 128);
  }
  const int dq_row0 = kBm == 128 ? 64 * c : 0;
  const int dq_col0 = kBm == 128 ? 0 : 64 * c;
  const int key_l = 64 * c + 16 * warp + g;

  // K and V of the block, by the consumers (the producer's 24 registers would spill).
  load_tile_sw<kBn, D, 256>(k_addr, p, k, b, r, k0, hk, ctid);
  load_tile_sw<kBn, D, 256>(v_addr, p, v, b, r, k0, hk, ctid);
  tile::cp_async_commit();
  tile::cp_async_wait_all();
  hp::fence_proxy_async();  // cp.async writes (generic proxy) -> the wgmma reads
  hp::named_bar_sync(kBarCons, 256);
  int stage = 0;
  uint32_t phases = 0;  // bit s: the parity the next wait on full[s] expects

  for (int h = hk * group; h < (hk + 1) * group; ++h) {
    for (int64_t q0 = q_begin; q0 < q_end; q0 += kBm, stage ^= 1) {
      hp::mbar_wait(&full[stage], (phases >> stage) & 1u);
      phases ^= 1u << stage;
      if (q0 + kBm > r.len) {
        // Rows past the request's end of this stage's Q and dO := 0 (TMA brought the next
        // request's rows or zeros), by both consumers, before either reads the stage.
        const int valid = static_cast<int>(r.len - q0);
        const int chunks = (kBm - valid) * 8;
        unsigned char *tile_s = smem + Cfg::kOffQdo + 2 * stage * Cfg::kQBytes;
        for (int i = ctid; i < 2 * Cfg::kDBlocks * chunks; i += 256) {
          const int panel = i / chunks, ch = i % chunks;
          *reinterpret_cast<uint4 *>(tile_s + panel * kBm * 128 + valid * 128 + ch * 16) =
              make_uint4(0, 0, 0, 0);
        }
        hp::fence_proxy_async();
        hp::named_bar_sync(kBarCons, 256);
      }
      const uint32_t q_addr = base + Cfg::kOffQdo + 2u * stage * Cfg::kQBytes;
      const uint32_t do_addr = q_addr + Cfg::kQBytes;
      const uint32_t ds_addr = ds_base + stage * Cfg::kDsBytes;
      const float *lse_s = reinterpret_cast<const float *>(smem + Cfg::kOffLse + 8 * stage * kBm);
      const float *delta_s = lse_s + kBm;

      uint32_t pf[4][4], df[4][4];  // P^T and dS^T as A fragments (the last sub-block's)
      // ---- 3. dV += P^T dO, dK += dS^T Q for the sub-block at row r0 (B: dO, Q MN-major).
      const auto issue_dv_dk = [&](int r0) {
        pair_dv_dk<D, T, kBm>(dv_acc, dk_acc, pf, df, q_addr, do_addr, r0);
      };
      // Once dV / dK have retired: this stage's Q, dO are no longer read.
      const auto release_stage = [&] {
        hp::fence_operands(dv_acc);
        hp::fence_operands(dk_acc);
        hp::mbar_arrive(&empty[stage]);
      };
#pragma unroll 1
      for (int sub = 0; sub < kBm / 64; ++sub) {
        const int r0 = 64 * sub;
        // ---- 1. S^T = K_c Q^T, dP^T = V_c dO^T.
        float s[32], dp[32];
        pair_s_dp<D, T, kBm, kBn>(s, dp, k_desc_a, v_desc_a, q_addr, do_addr, r0);
        // ---- 2. P^T and dS^T 2^t in place, masked where needed (backward_sm90_pair.cuh).
        pair_p_ds<Tag, WIN, PINPF>(
            s, dp, pf, p, r.len, q0, k0, r0, c, key_l, tq, lse_s, delta_s, scale_log2, ds_scale,
            [&] { return reinterpret_cast<uint32_t *>(smem + Cfg::kOffPin + ctid * 4); });
        pair_fragments<Tag, PINPF>(s, dp, pf, df);
        pair_store_ds<kBn>(ds_addr, sub, c, warp, lane, df);
        // Step 3 here (DQF: after the dQ product's issue, below).
        if constexpr (!kDqFirst) {
          hp::fence();
          issue_dv_dk(r0);
        }
      }
      hp::fence_proxy_async();            // dS^T (generic stores) -> the dQ wgmma (async proxy)
      hp::named_bar_sync(kBarCons, 256);  // both halves of dS^T are in

      // ---- 4. dQ partial = dS K; 5. onto the integer grid, into this consumer's half of
      // the staging tile, pushed by producer warp 1 + c.
      const uint32_t ds_off = (stage * Cfg::kDsBytes) >> 4;
      const auto dq_pass = [&](auto n_tag) {
        constexpr int kN = decltype(n_tag)::value;
        float acc[kN / 2];
        hp::fence();
#pragma unroll
        for (int ks = 0; ks < kBn / 16; ++ks)
          hp::wgmma_ss<kN, T, 1, 1>(acc, dq_desc_a + ds_off + ks * 128, dq_desc_b + ks * 128,
                                    ks > 0);
        hp::commit();
        if constexpr (kDqFirst) {
          issue_dv_dk(0);  // step 3 of the pair's single sub-block, behind the dQ product
          hp::wait<1>();   // the dQ product (groups retire in order); dV / dK still run
          hp::fence_operands(acc);
        } else {
          hp::wait<0>();  // (also retires step 3)
          hp::fence_operands(acc);
          release_stage();
        }
        hp::named_bar_sync(kBarEmpty + c, 128 + 32);
        dq_onto_grid<kN, kBm>(acc, staging, dq_row0, dq_col0, warp, g, tq, dq_one_mul, dq_mul,
                              dq_k);
      };
      if (c == 0)
        dq_pass(std::integral_constant<int, Cfg::kDqN0>{});
      else
        dq_pass(std::integral_constant<int, Cfg::kDqN1>{});
      hp::fence_proxy_async();  // staging (generic stores) -> the bulk reduce (async proxy)
      hp::named_bar_arrive(kBarFull + c, 128 + 32);
      if constexpr (kDqFirst) {
        hp::wait<0>();  // dV / dK
        release_stage();
      }
    }
  }

  // ---- Epilogue: the consumer's 64 keys of dK and dV (backward_sm90.cu).
  const float dk_unscale = exp2i(-gs.t);
  if (epi16) {
    // Each warp stages its 16 keys' rows in its own 16 lines of V: lines line0 .. line0 + 15 of
    // both column blocks, the V rows of the same keys. Why they are free here, with no new
    // barrier: V's lines 64 c .. 64 c + 63 are read only by this consumer's dP^T wgmmas (A =
    // v_desc_a; the other consumer's wgmmas read its own V lines, the dQ products read dS^T and
    // K, dV / dK read Q, dO and registers; the producer never touches K or V), and written only
    // by the K / V load before the loop (waited, fenced, then the first kBarCons). Every thread
    // of this consumer retires its last dP^T (the wait<0> in step 2 of the last pair's last
    // sub-block) before it arrives at the last pair's kBarCons, which this warp has passed: no
    // wgmma reads these lines any more. That barrier is followed, in this thread, by the
    // fence.proxy.async behind the last dQ conversion, which orders those async-proxy reads
    // before the generic stmatrix writes below (as for the reuse of a dS^T buffer). The
    // producer's loads in flight (Q / dO, lse / Delta) and the dQ bulk reduces (the staging
    // tile) touch other regions, and the other consumer, perhaps still in its last pair, reads
    // neither these lines nor anything written here. A warp touches only its own lines, so
    // __syncwarp orders the stmatrix before the other lanes' loads, and dV's loads before dK's
    // stmatrix: at D 128 one consumer's 16 KB of V holds one of dV / dK at a time.
    const int line0 = 64 * c + 16 * warp;
    const int64_t key0 = k0 + line0;
    const int64_t left = r.len - key0;
    if (left <= 0) return;
    const int n_rows = left < 16 ? static_cast<int>(left) : 16;
    // Row i of the warp at element_offset(.., key0 + i, ..) = element_offset(.., key0, ..) + i
    // token_stride (dense and packed alike).
    T *const dk_rows = static_cast<T *>(dk.data) + element_offset(p, dk, b, r, key0, hk);
    T *const dv_rows = static_cast<T *>(dv.data) + element_offset(p, dv, b, r, key0, hk);
    stage_warp_rows<D, kBn, Tag>(v_addr, line0, lane, dv_acc, [](float a) { return a; });
    __syncwarp();
    store_warp_rows<D, kBn>(v_addr, line0, lane, n_rows, dv_rows, dv.token_stride);
    __syncwarp();
    stage_dk_rows<D, kBn, Tag>(v_addr, line0, lane, dk_acc, gs.valid, dk_unscale, p.softmax_scale);
    __syncwarp();
    store_warp_rows<D, kBn>(v_addr, line0, lane, n_rows, dk_rows, dk.token_stride);
    return;
  }
  store_dk_dv_direct<D, Tag>(p, dk, dv, b, r, k0, key_l, hk, tq, dk_acc, dv_acc, gs.valid,
                             dk_unscale);
}

}  // namespace fold::cuda::bwd
