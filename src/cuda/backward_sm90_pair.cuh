// The work of one (query block, key block) pair that both wgmma backward kernels do alike: the
// synchronous kernel (backward_sm90.cu, two warpgroups of 64 keys) and the warp-specialised one
// (backward_sm90_ws.cuh, two consumer warpgroups of 64 keys). Step numbers are those of
// backward_sm90.cu's header. `w` is the warpgroup's (consumer's) index among the two that share
// the key block: it owns keys 64 w .. 64 w + 63. One copy, so that the two kernels cannot drift
// apart; scripts/sass_digest.py showed both kernels' SASS unchanged by the move.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/float_bits.h"
#include "core/grid_scale.h"
#include "core/problem.h"
#include "cuda/backward_sm90_tiles.cuh"
#include "cuda/backward_window.cuh"
#include "cuda/hopper/stmatrix.cuh"
#include "cuda/hopper/wgmma.cuh"
#include "cuda/tile_mma.cuh"

namespace fold::cuda::bwd {

constexpr float kPairLog2e = 1.4426950408889634f;

// Step 1 for the sub-block of 64 query rows at tile row r0: S^T = K_w Q^T and dP^T = V_w dO^T,
// [64 keys x 64 rows] (K-major A: this warpgroup's K / V lines; B: the stage's Q / dO). Returns
// once S^T has landed (with anything committed before it); dP^T's group may still run while P is
// computed.
template <int D, class T, int kBm, int kBn>
__device__ __forceinline__ void pair_s_dp(float (&s)[32], float (&dp)[32], uint64_t k_desc_a,
                                          uint64_t v_desc_a, uint32_t q_addr, uint32_t do_addr,
                                          int r0) {
  namespace hp = hopper;
  const uint64_t q_desc = hp::desc_k_major_sw128(q_addr + r0 * 128);
  const uint64_t do_desc = hp::desc_k_major_sw128(do_addr + r0 * 128);
  hp::fence();
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    const uint32_t off_k = ((ks >> 2) * kBn * 128 + (ks & 3) * 32) >> 4;
    const uint32_t off_q = ((ks >> 2) * kBm * 128 + (ks & 3) * 32) >> 4;
    hp::wgmma_ss<64, T, 0, 0>(s, k_desc_a + off_k, q_desc + off_q, ks > 0);
  }
  hp::commit();
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    const uint32_t off_k = ((ks >> 2) * kBn * 128 + (ks & 3) * 32) >> 4;
    const uint32_t off_q = ((ks >> 2) * kBm * 128 + (ks & 3) * 32) >> 4;
    hp::wgmma_ss<64, T, 0, 0>(dp, v_desc_a + off_k, do_desc + off_q, ks > 0);
  }
  hp::commit();
  hp::wait<1>();
  hp::fence_operands(s);
}

// Step 2: P^T and dS^T 2^t in place (s <- P, dp <- dS), masked where needed; waits for dP^T.
// Element s[4 j + 2 i + e] is (key key_l + 8 i, row r0 + 8 j + 2 tq + e). lse_s / delta_s: the
// stage's lse and Delta of the tile's rows. pin_at(): this thread's word of the pin (below), a
// callable so that the address is formed where the word is stored (formed at the call, ptxas
// scheduled the warp-specialised kernel differently). PINPF:
// pf receives P^T's A fragments of step 3 (else pair_fragments packs them).
template <class Tag, bool WIN, bool PINPF, class PinAt>
__device__ __forceinline__ void pair_p_ds(float (&s)[32], float (&dp)[32], uint32_t (&pf)[4][4],
                                          const fold_attn_problem_t &p, const int len,
                                          const int64_t q0, const int64_t k0, const int r0,
                                          const int w, const int key_l, const int tq,
                                          const float *lse_s, const float *delta_s,
                                          const float scale_log2, const float ds_scale,
                                          const PinAt &pin_at) {
  namespace hp = hopper;
  bool need_mask =
      k0 + 64 * w + 64 > len || q0 + r0 + 64 > len || (p.causal && k0 + 64 * w + 63 > q0 + r0);
  const int key_limit = static_cast<int>(len - k0);  // key_rel < key_limit
  const int row_limit = static_cast<int>(len - q0);  // row_rel < row_limit
  const int diag = static_cast<int>(q0 - k0);        // causal: key_rel - row_rel <= diag
  // WIN: the visible diagonals (causal included), and whether they leave out a pair of this
  // warpgroup's keys x the sub-block's rows (on either side: a window tile of the first query
  // block is cut below, one of the last above, a narrow window's both).
  DiagBand band{};
  if constexpr (WIN) {
    band = diag_band(p, q0, k0);
    need_mask = need_mask || band.cuts(r0, r0 + 63, 64 * w, 64 * w + 63);
  }
  const auto finish = [&](auto masked) {
    constexpr bool kMasked = decltype(masked)::value;
    const auto valid = [&](int j, int i, int e) {
      if constexpr (!kMasked) return true;
      const int key = key_l + 8 * i, row = r0 + 8 * j + 2 * tq + e;
      if constexpr (WIN)
        return key < key_limit && row < row_limit && band.holds(key - row);
      else
        return key < key_limit && row < row_limit && (!p.causal || key - row <= diag);
    };
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float2 l2 = *reinterpret_cast<const float2 *>(lse_s + r0 + 8 * j + 2 * tq);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int idx = 4 * j + 2 * i + e;
          const float lse2 = (e ? l2.y : l2.x) * kPairLog2e;
          // Clamped to 1 as in the CPU reference (grid_scale.h rests on P <= 1).
          s[idx] = valid(j, i, e) ? fminf(1.0f, tile::fast_exp2(s[idx] * scale_log2 - lse2)) : 0.0f;
        }
    }
    {
      // ptxas otherwise sinks most of the P work past the wait below (it does not model the
      // wait's latency). Shared-memory stores are not moved across the wait, so one word that
      // depends on every packed P (their XOR) is stored in front of it: P is finished there and
      // overlaps dP^T's wgmmas. (The word is never read; one 4-byte store per thread instead of
      // the packed P's 64 bytes.) PINPF: the words are step 3's A fragments themselves, kept
      // live through dS (D 64 206 registers, D 128 254: the synchronous kernel is only its
      // fallback there); pin0 packs P again after the wait instead.
      uint32_t fold = 0;
      if constexpr (PINPF) {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
#pragma unroll
          for (int x = 0; x < 4; ++x) {
            pf[kk][x] = tile::pack2(s[8 * kk + 2 * x], s[8 * kk + 2 * x + 1], Tag{});
            fold ^= pf[kk][x];
          }
      } else {
#pragma unroll
        for (int k = 0; k < 16; ++k) fold ^= tile::pack2(s[2 * k], s[2 * k + 1], Tag{});
      }
      *pin_at() = fold;
    }
    hp::wait<0>();  // dP^T
    hp::fence_operands(dp);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float2 dl = *reinterpret_cast<const float2 *>(delta_s + r0 + 8 * j + 2 * tq);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int idx = 4 * j + 2 * i + e;
          const float dlv = e ? dl.y : dl.x;
          dp[idx] = valid(j, i, e) ? s[idx] * (dp[idx] - dlv) * ds_scale : 0.0f;
        }
    }
  };
  if (need_mask)
    finish(std::true_type{});
  else
    finish(std::false_type{});
}

// P^T (unless PINPF packed it in step 2) and dS^T as step 3's A fragments: k16 step kk covers
// rows r0 + 16 kk.., the accumulator pairs in order.
template <class Tag, bool PINPF>
__device__ __forceinline__ void pair_fragments(const float (&s)[32], const float (&dp)[32],
                                               uint32_t (&pf)[4][4], uint32_t (&df)[4][4]) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      if constexpr (!PINPF)
        pf[kk][x] = tile::pack2(s[8 * kk + 2 * x], s[8 * kk + 2 * x + 1], Tag{});
      df[kk][x] = tile::pack2(dp[8 * kk + 2 * x], dp[8 * kk + 2 * x + 1], Tag{});
    }
}

// Step 3 for the sub-block at tile row r0: dV += P^T dO and dK += dS^T Q (A: the fragments in
// registers; B: the stage's dO and Q, MN-major, column blocks kBm * 128 bytes apart, k16 step kk
// at row r0 + 16 kk), committed as one group. The caller issues the wgmma fence first.
template <int D, class T, int kBm>
__device__ __forceinline__ void pair_dv_dk(float (&dv_acc)[D / 2], float (&dk_acc)[D / 2],
                                           const uint32_t (&pf)[4][4], const uint32_t (&df)[4][4],
                                           uint32_t q_addr, uint32_t do_addr, int r0) {
  namespace hp = hopper;
  const uint64_t do_desc = hp::desc_mn_major_sw128(do_addr + r0 * 128, kBm * 128);
  const uint64_t q_desc = hp::desc_mn_major_sw128(q_addr + r0 * 128, kBm * 128);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    hp::wgmma_rs<D, T, 1>(dv_acc, pf[kk], do_desc + kk * 128, 1);
    hp::wgmma_rs<D, T, 1>(dk_acc, df[kk], q_desc + kk * 128, 1);
  }
  hp::commit();
}

// dS^T into shared memory at ds_addr, [row block][key][64 rows] swizzled (MN-major A of step 4),
// by stmatrix: df[m][x] is this thread's fragment of the 8 x 8 block (keys 64 w + 16 warp +
// 8 (x & 1) + 0..7, rows 8 j .. 8 j + 7 of the sub-block, j = 2 m + (x >> 1)); lane 8 x + rr
// gives the address of that block's key rr, whose 16-byte chunk j sits at j ^ (key & 7) = j ^ rr
// in the key's 128-byte line. (Four stores per thread and sub-block instead of sixteen, the same
// bytes at the same places.)
template <int kBn>
__device__ __forceinline__ void pair_store_ds(uint32_t ds_addr, int sub, int w, int warp, int lane,
                                              const uint32_t (&df)[4][4]) {
  const int x = lane >> 3, rr = lane & 7;
  const uint32_t line = ds_addr + sub * (kBn * 128) + (64 * w + 16 * warp + 8 * (x & 1) + rr) * 128;
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    const int j = 2 * m + (x >> 1);
    hopper::stmatrix_x4(line + ((j ^ rr) << 4), df[m][0], df[m][1], df[m][2], df[m][3]);
  }
}

// Step 5: the dQ partial `acc` (kN columns of this warpgroup's share, the wgmma accumulator
// layout) onto the integer grid, 2^(s - t) x acc rounded to nearest-even int32 (saturating), into
// the staging tile (stage_index's swizzled layout). scale_pow2 (two multiplies, for any exponent)
// gives the same integers as one multiply by 2^k whenever 2^k is a normal float: both are exact
// unless the result overflows (infinity either way) or falls below 2^-126, which rounds to 0
// either way.
template <int kN, int kBm>
__device__ __forceinline__ void dq_onto_grid(const float (&acc)[kN / 2], int32_t *staging,
                                             int dq_row0, int dq_col0, int warp, int g, int tq,
                                             bool dq_one_mul, float dq_mul, int dq_k) {
  const auto convert = [&](auto to_grid) {
#pragma unroll
    for (int j = 0; j < kN / 8; ++j)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int row = dq_row0 + 16 * warp + g + 8 * i, col = dq_col0 + 8 * j + 2 * tq;
        int2 units;
        units.x = __float2int_rn(to_grid(acc[4 * j + 2 * i]));
        units.y = __float2int_rn(to_grid(acc[4 * j + 2 * i + 1]));
        *reinterpret_cast<int2 *>(staging + stage_index<kBm>(row, col)) = units;
      }
  };
  if (dq_one_mul)
    convert([&](float x) { return mul_rn(x, dq_mul); });
  else
    convert([&](float x) { return scale_pow2(x, dq_k); });
}

// The epilogue without the 16-byte staging (FOLD_BWD_VARIANT=epi0): this thread's two key rows
// (key_l, key_l + 8 of the block) of dK (unscaled by 2^-t, times the softmax scale; NaN where the
// bounds were not finite) and dV, 4-byte stores from the accumulator layout.
template <int D, class Tag>
__device__ __forceinline__ void store_dk_dv_direct(const fold_attn_problem_t &p,
                                                   const fold_tensor_t &dk, const fold_tensor_t &dv,
                                                   int b, const Request &r, int64_t k0, int key_l,
                                                   int hk, int tq, const float (&dk_acc)[D / 2],
                                                   const float (&dv_acc)[D / 2], int valid,
                                                   float dk_unscale) {
  using T = typename Tag::T;
  const float nan = __int_as_float(0x7fffffff);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t key = k0 + key_l + 8 * i;
    if (key >= r.len) continue;
    T *dk_row = static_cast<T *>(dk.data) + element_offset(p, dk, b, r, key, hk) + 2 * tq;
    T *dv_row = static_cast<T *>(dv.data) + element_offset(p, dv, b, r, key, hk) + 2 * tq;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      float x[2];
#pragma unroll
      for (int e = 0; e < 2; ++e)
        x[e] = valid ? mul_rn(mul_rn(dk_acc[4 * j + 2 * i + e], dk_unscale), p.softmax_scale) : nan;
      *reinterpret_cast<uint32_t *>(dk_row + 8 * j) = tile::pack2(x[0], x[1], Tag{});
      *reinterpret_cast<uint32_t *>(dv_row + 8 * j) =
          tile::pack2(dv_acc[4 * j + 2 * i], dv_acc[4 * j + 2 * i + 1], Tag{});
    }
  }
}

}  // namespace fold::cuda::bwd
