// Training forward on the GPU, v1: FlashAttention-3 structure on sm_90a. wgmma (HGMMA) for
// both GEMMs, TMA loads through an mbarrier pipeline, warp specialisation and setmaxnreg.
//
// One CTA per (query block of 128 rows, head, request), 3 warpgroups (384 threads):
//   warpgroup 0, producer: gives its registers away (setmaxnreg.dec 24); one thread issues
//     the TMA loads: Q once, then K and V of every key block through kStages stages
//     (full barriers: the bytes landed; empty barriers: both consumers are done with it).
//   warpgroups 1, 2, consumers (setmaxnreg.inc 240): consumer c owns query rows
//     64c..64c+63 of the block. Per key block: S = Q K^T (SS wgmma, m64 n=block_n k16,
//     D/16 steps), mask, online softmax in base 2, P rounded to the dtype in registers,
//     O += P V (RS wgmma: A = P from registers, B = V MN-major, N = D (96 -> 128)).
// Shared tiles are 128B-swizzled panels of 64 columns (hopper/wgmma.cuh); D = 96 is held as
// 128 columns whose last 32 TMA fills with zeros (S skips them, P V computes zeros there).
//
// Semantics as v0 and the CPU reference (cpu/forward.cpp): s = (q . k) scale log2(e) in fp32,
// row max of the raw scores scaled afterwards (scale > 0), P = 2^(s scale log2 e - m) rounded
// to the input dtype for P V, l summed from the unrounded P, out = acc / l,
// lse = (m + log2 l) ln 2.
//
// Determinism and invariance: tiles start at the request's own first token (TMA row
// coordinate = request start + block offset); tile sizes and the block order come from
// forward_plan(D) and the request's own length; each row's keys are visited in ascending
// block order by one warpgroup with a fixed instruction sequence. Keys that a TMA box
// brings in past the request's end (the next packed request's tokens, or zeros past the
// tensor) get score -inf (P = 0 exactly) and, in the request's last block, their V rows are
// zeroed in shared memory before P V, so even non-finite values there contribute nothing.
// Query rows past the end are computed (rows are independent) but never stored. No split-KV,
// no atomics: out and lse of a request are the same bits alone, in any batch, at any
// packed offset, and across repeats.
//
// Sliding windows (core/window.h): v1.2 (and v0, forward_v0.cu); v1 and v1.1 refuse a window that
// masks anything. In separate kernel instances (kWindow), so that calls without one run the code
// of before. A tile the window cuts visits the key blocks the CPU reference visits (visible_keys,
// aligned to the request's start) and masks with window_mask.cuh's rule; a tile it does not cut
// runs the forms of before, the same instruction sequence (so a window that hides nothing from
// a request should give it the bits of no window: the GPU tests are to confirm it across the two
// instances). See forward_v12_kernel.
//
// Attention sinks (p.sinks, gpt-oss): v1.2 (and v0) in separate instances (kSinks), chosen from
// p.sinks != nullptr, so that calls without sinks run the code of before; v1, v1.1 and v1.2's A/B
// forms (FOLD_FWD_EPI=stg, FOLD_FWD_VARIANT=v1.2-2wg) refuse them. Each tile with rows reads its
// head's sink once and folds it into every row after the last key block, before out = acc / l and
// the LSE (add_sink, as the CPU reference's add_sink), so the LSE holds the sink's mass and the
// backward (which recomputes P from it) needs no change.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "core/problem.h"
#include "core/status.h"
#include "core/tile_plan.h"
#include "core/window.h"
#include "cuda/hopper/mbarrier.cuh"
#include "cuda/hopper/tma.cuh"
#include "cuda/hopper/warpgroup.cuh"
#include "cuda/hopper/wgmma.cuh"
#include "cuda/kv_bounds.cuh"
#include "cuda/launch.h"
#include "cuda/launch_setup.h"
#include "cuda/stage_rows.cuh"
#include "cuda/tensor_map.h"
#include "cuda/tile_mma.cuh"
#include "cuda/tile_order.cuh"
#include "cuda/window_mask.cuh"

namespace fold::cuda {

namespace {

namespace hw = hopper;
using tile::Bf16;
using tile::F16;
using tile::fast_exp2;
using tile::pack2;

constexpr int kThreads = 3 * hw::kWarpgroupThreads;
constexpr int kConsumerThreads = 2 * hw::kWarpgroupThreads;
constexpr int kProducerRegs = 24;
constexpr int kScanWarps = 3;       // the producer warps that take the K / V bounds (v1.2, kScan)
constexpr int kConsumerRegs = 240;  // 128 x 24 + 256 x 240 = 64512 <= 65536
constexpr int kVTailBarrier = 1;    // named barrier of the 256 consumer threads
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int D, int kStagesT, int kBmT, int kBnT>
struct CfgT {
  static constexpr int kBm = kBmT;
  static constexpr int kBn = kBnT;
  static constexpr int kDp = (D + 63) / 64 * 64;  // columns held in shared memory
  static constexpr int kPanels = kDp / 64;
  static constexpr int kStages = kStagesT;
  static constexpr uint32_t kQBytes = kBm * kDp * 2;
  static constexpr uint32_t kKvBytes = kBn * kDp * 2;  // one K or one V tile
  static constexpr uint32_t kQPanel = kBm * 128;       // bytes per 64-column panel
  static constexpr uint32_t kKvPanel = kBn * 128;
  // Tiles (1024-aligned), then the barriers (v1: q, k_full, v_full, empty; v1.1: q, k_full,
  // v_full, k_empty, v_empty); + 1024 to align the dynamic base.
  static constexpr int kBarrierBytes = 8 * (1 + 4 * kStages);
  static constexpr int kSmemBytes = 1024 + kQBytes + 2 * kStages * kKvBytes + kBarrierBytes;
  static_assert(kBm % 64 == 0 && kBm <= 192, "consumer warpgroups of 64 rows");
  static_assert(kBn % 16 == 0 && kBn <= 256, "wgmma N");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};
template <int D, int kStagesT = 2>
using Cfg = CfgT<D, kStagesT, forward_plan(D).block_m, forward_plan(D).block_n>;

// 0 for a broadcast view's head/batch coordinate (tensor_map.h), else 1.
struct CoordMuls {
  int32_t q_head, q_batch, k_head, k_batch, v_head, v_batch;
};

// A request's last key block: the V rows past its end (rows valid .. kBn - 1 of the stage at
// v_stage) may hold another request's values (even inf / NaN, and 0 * inf = NaN). The `count`
// consumer threads (this one is `first`) zero them, each a share of the 16-byte chunks (a row's
// 128 bytes per panel are swizzled within the row only), make the async proxy (wgmma, and the
// producer's later TMA writes to the stage) see the stores, and wait for each other.
template <class C>
__device__ __forceinline__ void zero_v_tail(unsigned char *v_stage, int valid, int first,
                                            int count) {
  const int chunks = (C::kBn - valid) * C::kPanels * 8;
  for (int idx = first; idx < chunks; idx += count) {
    const int row = valid + idx / (C::kPanels * 8);
    const int pn = (idx / 8) % C::kPanels;
    const int chunk = idx % 8;
    *reinterpret_cast<uint4 *>(v_stage + pn * C::kKvPanel + row * 128 + chunk * 16) =
        make_uint4(0, 0, 0, 0);
  }
  hw::fence_proxy_async();
  // Not bar.sync: the consumers of one tile may run different forms of it (v1.2's trimmed tiles:
  // kFull / kHalf / kIdle, each its own inlined copy of this function), so they meet here from
  // different instructions, which bar.sync's `.aligned` leaves undefined (compute-sanitizer's
  // synccheck reports it, session 30 round 7 / session 31 round 1 on a reduced kernel). ptxas emits
  // the same SASS for both forms here (cuobjdump, every forward instance, session 31).
  hw::named_bar_sync_unaligned(kVTailBarrier, count);
}

template <int D, class Tag>
__global__ void __launch_bounds__(kThreads, 1)
    forward_v1_kernel(const fold_attn_problem_t p, const __grid_constant__ CUtensorMap tm_q,
                      const __grid_constant__ CUtensorMap tm_k,
                      const __grid_constant__ CUtensorMap tm_v, const CoordMuls muls,
                      const fold_tensor_t out, float *__restrict__ lse) {
  using C = Cfg<D>;
  using T = typename Tag::T;
  constexpr int kBm = C::kBm, kBn = C::kBn, kDp = C::kDp, kStages = C::kStages;
  extern __shared__ unsigned char smem_raw[];
  unsigned char *smem = reinterpret_cast<unsigned char *>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~static_cast<uintptr_t>(1023));
  unsigned char *q_s = smem;
  unsigned char *k_s = q_s + C::kQBytes;             // stage s at k_s + s kKvBytes
  unsigned char *v_s = k_s + kStages * C::kKvBytes;  // stage s at v_s + s kKvBytes
  auto *bars = reinterpret_cast<uint64_t *>(v_s + kStages * C::kKvBytes);
  uint64_t *q_full = bars;
  uint64_t *k_full = bars + 1;
  uint64_t *v_full = k_full + kStages;
  uint64_t *empty = v_full + kStages;

  // Longest-first: blockIdx.x = y * n_heads + h, and y = 0 is every head's last query block
  // when causal (most keys); the order never changes which CTA computes what.
  const int h = static_cast<int>(blockIdx.x % static_cast<unsigned>(p.n_heads));
  const int y = static_cast<int>(blockIdx.x / static_cast<unsigned>(p.n_heads));
  const int b = blockIdx.y;
  const Request r = request_of(p, b);
  const int n_qblocks = (r.len + kBm - 1) / kBm;
  const int qb = p.causal ? n_qblocks - 1 - y : y;
  if (qb < 0 || qb >= n_qblocks) return;  // uniform over the CTA, before any barrier
  const int q0 = qb * kBm;
  const int hk = h / (p.n_heads / p.n_kv_heads);
  const int k_end = p.causal ? min(r.len, q0 + kBm) : r.len;
  const int n_kblocks = (k_end + kBn - 1) / kBn;
  // TMA coordinates of token 0 of the request: dense (token, batch) = (0, b); packed
  // (first, 0). The host guarantees total_tokens < 2^31.
  const bool dense = p.cu_seqlens == nullptr;
  const int32_t row_base = dense ? 0 : static_cast<int32_t>(r.first);
  const int32_t batch = dense ? b : 0;

  if (threadIdx.x == 0) {
    hw::mbar_init(q_full, 1);
    for (int s = 0; s < kStages; ++s) {
      hw::mbar_init(&k_full[s], 1);
      hw::mbar_init(&v_full[s], 1);
      hw::mbar_init(&empty[s], kConsumerThreads);
    }
    hw::fence_barrier_init();
  }
  __syncthreads();

  const int wg = hw::warpgroup_index();
  if (wg == 0) {
    // ---- producer ----
    hw::setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x == 0) {
      hw::tma_prefetch_descriptor(&tm_q);
      hw::tma_prefetch_descriptor(&tm_k);
      hw::tma_prefetch_descriptor(&tm_v);
      hw::mbar_arrive_expect_tx(q_full, C::kQBytes);
#pragma unroll
      for (int pn = 0; pn < C::kPanels; ++pn)
        hw::tma_load_4d(q_s + pn * C::kQPanel, &tm_q, q_full, pn * 64, h * muls.q_head,
                        row_base + q0, batch * muls.q_batch);
      for (int j = 0; j < n_kblocks; ++j) {
        const int s = j % kStages;
        const int use = j / kStages;
        if (use > 0) hw::mbar_wait(&empty[s], (use - 1) & 1);
        const int32_t row = row_base + j * kBn;
        hw::mbar_arrive_expect_tx(&k_full[s], C::kKvBytes);
#pragma unroll
        for (int pn = 0; pn < C::kPanels; ++pn)
          hw::tma_load_4d(k_s + s * C::kKvBytes + pn * C::kKvPanel, &tm_k, &k_full[s], pn * 64,
                          hk * muls.k_head, row, batch * muls.k_batch);
        hw::mbar_arrive_expect_tx(&v_full[s], C::kKvBytes);
#pragma unroll
        for (int pn = 0; pn < C::kPanels; ++pn)
          hw::tma_load_4d(v_s + s * C::kKvBytes + pn * C::kKvPanel, &tm_v, &v_full[s], pn * 64,
                          hk * muls.v_head, row, batch * muls.v_batch);
      }
    }
    return;
  }

  // ---- consumers ----
  hw::setmaxnreg_inc<kConsumerRegs>();
  const int cw = wg - 1;  // rows 64 cw .. 64 cw + 63 of the block
  const int tid = hw::thread_in_warpgroup();
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int r0 = 64 * cw + 16 * warp;  // the warp's first row in the block
  const float scale_log2 = p.softmax_scale * kLog2e;
  const float neg_inf = -__int_as_float(0x7f800000);
  const uint32_t q_addr = hw::smem_u32(q_s) + cw * 64 * 128;
  const uint32_t k_addr = hw::smem_u32(k_s);
  const uint32_t v_addr = hw::smem_u32(v_s);

  float o[kDp / 2];
#pragma unroll
  for (int i = 0; i < kDp / 2; ++i) o[i] = 0.0f;
  float m[2] = {neg_inf, neg_inf}, l[2] = {0.0f, 0.0f};  // rows g, g + 8 (l: lane-partial)

  hw::mbar_wait(q_full, 0);
  for (int j = 0; j < n_kblocks; ++j) {
    const int s = j % kStages;
    const uint32_t parity = (j / kStages) & 1;
    const int k0 = j * kBn;

    // S = Q K^T (k-steps over the real D only: columns past D are zeros in both).
    float sc[kBn / 2];
    hw::mbar_wait(&k_full[s], parity);
    hw::fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t off = static_cast<uint32_t>(kk % 4) * 32u;  // k16 step inside a panel
      const uint64_t da = hw::desc_k_major_sw128(q_addr + (kk / 4) * C::kQPanel + off);
      const uint64_t db =
          hw::desc_k_major_sw128(k_addr + s * C::kKvBytes + (kk / 4) * C::kKvPanel + off);
      hw::wgmma_ss<kBn, T, 0, 0>(sc, da, db, kk > 0 ? 1 : 0);
    }
    hw::commit();
    hw::wait<0>();
    hw::fence_operands(sc);

    // Mask (only blocks reaching past the request's end or the warp's diagonal; decided
    // from request-relative positions) and row maxima of the raw scores.
    float row_max[2] = {neg_inf, neg_inf};
    const bool need_mask = k0 + kBn > r.len || (p.causal && k0 + kBn - 1 > q0 + r0);
    if (need_mask) {
      const int key_limit = min(r.len - k0, kBn);
      const int diag = q0 + r0 - k0;  // key (block-relative) <= diag + row
#pragma unroll
      for (int i = 0; i < kBn / 2; ++i) {
        const int row = g + ((i >> 1) & 1) * 8;
        const int key = (i >> 2) * 8 + 2 * t + (i & 1);
        const bool masked = key >= key_limit || (p.causal && key > diag + row);
        if (masked) sc[i] = neg_inf;
        row_max[(i >> 1) & 1] = fmaxf(row_max[(i >> 1) & 1], sc[i]);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kBn / 2; ++i) row_max[(i >> 1) & 1] = fmaxf(row_max[(i >> 1) & 1], sc[i]);
    }
    float alpha[2], m_use[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      row_max[i] = fmaxf(row_max[i], __shfl_xor_sync(0xffffffffu, row_max[i], 1));
      row_max[i] = fmaxf(row_max[i], __shfl_xor_sync(0xffffffffu, row_max[i], 2));
      const float m_new = fmaxf(m[i], row_max[i] * scale_log2);
      // A row with every key so far masked keeps m = -inf, l = 0, acc = 0; its P is 0.
      alpha[i] = m_new == neg_inf ? 1.0f : (m[i] == neg_inf ? 0.0f : fast_exp2(m[i] - m_new));
      m[i] = m_new;
      m_use[i] = m_new == neg_inf ? 0.0f : m_new;
      l[i] *= alpha[i];
    }
    // P (fp32 sum; rounded to the dtype as the A fragments of P V).
    uint32_t pa[kBn / 16][4];
#pragma unroll
    for (int i = 0; i < kBn / 2; ++i) {
      const float pij = fast_exp2(__fmaf_rn(sc[i], scale_log2, -m_use[(i >> 1) & 1]));
      sc[i] = pij;
      l[(i >> 1) & 1] += pij;
    }
#pragma unroll
    for (int kt = 0; kt < kBn / 16; ++kt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        pa[kt][e] = pack2(sc[8 * kt + 2 * e], sc[8 * kt + 2 * e + 1], Tag{});
#pragma unroll
    for (int i = 0; i < kDp / 2; ++i) o[i] *= alpha[(i >> 1) & 1];

    hw::mbar_wait(&v_full[s], parity);
    if (k0 + kBn > r.len)
      zero_v_tail<C>(v_s + s * C::kKvBytes, r.len - k0, cw * hw::kWarpgroupThreads + tid,
                     kConsumerThreads);

    // O += P V (V MN-major: panel stride kKvPanel, k16 step = 16 rows = 2048 bytes).
    hw::fence();
#pragma unroll
    for (int kt = 0; kt < kBn / 16; ++kt) {
      const uint64_t dv =
          hw::desc_mn_major_sw128(v_addr + s * C::kKvBytes + kt * 2048u, C::kKvPanel);
      hw::wgmma_rs<kDp, T, 1>(o, pa[kt], dv, 1);
    }
    hw::commit();
    hw::wait<0>();
    hw::fence_operands(o);
    hw::mbar_arrive(&empty[s]);  // this thread is done with stage s
  }

  // Epilogue: row sums, out = acc / l, lse = (m + log2 l) ln 2; rows past the end skipped.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
  }
  const float inv[2] = {1.0f / l[0], 1.0f / l[1]};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = q0 + r0 + g + 8 * i;
    if (row >= r.len) continue;
    T *dst = static_cast<T *>(out.data) + element_offset(p, out, b, r, row, h);
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
      *reinterpret_cast<uint32_t *>(dst + nt * 8 + 2 * t) =
          pack2(o[4 * nt + 2 * i] * inv[i], o[4 * nt + 2 * i + 1] * inv[i], Tag{});
    if (t == 0)
      lse[static_cast<int64_t>(h) * p.total_tokens + r.first + row] = (m[i] + __log2f(l[i])) * kLn2;
  }
}

// ---------------------------------------------------------------------------------------
// v1.1: the same tiles, numerics and invariance as v1, with the softmax overlapped with the
// tensor cores (FlashAttention-3's two schemes together):
//   intra-warpgroup: per key block j >= 1 a consumer issues S_j = Q K_j^T and then
//     O += P_{j-1} V_{j-1} (two wgmma groups), waits for S_j alone (wait_group 1), does the
//     softmax of block j while P V still runs, then waits for P V, rescales O by block j's
//     alpha and packs P_j. O's update order is v1's (O = alpha_j O + P_j V_j, the rescale
//     before the P V of the same block), so the bits are v1's.
//   inter-warpgroup ping-pong: two named barriers hand the "issue" turn back and forth, so
//     consumer 0 issues its GEMMs, then consumer 1 does, and each one's softmax runs while
//     the other's GEMMs occupy the tensor cores. Both consumers of a CTA take the same
//     number of turns (the block range is per CTA); consumer 0's first turn needs no token
//     and consumer 1's last turn hands none, so no barrier arrival is left pending.
// Loads: K and V have their own empty barriers (K_j is released as soon as S_j is done,
// V_{j-1} after P V), the producer issues K_j ahead of V_{j-1} (the order the consumers
// need them), and the pipeline has 3 stages where shared memory allows (D <= 128).
// Empty barriers count one arrival per consumer warp (lane 0, after the warp's wait_group).
// Grid: one linear index over (query block y, request b, head h) in TileOrder's chunks of
// (request, head) pairs, y slowest inside a chunk, so that the chunk's longest causal blocks
// (y = 0) start before any shorter one: the hardware dispatches CTAs in index order, which
// makes this a longest-first schedule per chunk, and the resident CTAs share the K / V of a
// chunk's few heads in L2. Which CTA runs which tile never changes what the tile computes.
constexpr int kPingPongBarrier = 2;  // named barriers 2, 3: consumer 0's and 1's issue turn
constexpr int kConsumerWarps = kConsumerThreads / 32;

// 3 stages where they fit (D <= 128), else 2 (Cfg's shared-memory formula for 3 stages).
template <int D>
struct V11Stages {
  static constexpr int kDp = (D + 63) / 64 * 64;
  static constexpr int kBytes3 = 1024 + forward_plan(D).block_m * kDp * 2 +
                                 2 * 3 * forward_plan(D).block_n * kDp * 2 + 8 * (1 + 4 * 3);
  static constexpr int value = kBytes3 <= 227 * 1024 ? 3 : 2;
};

// The maximum of v[0 .. N - 1], pairwise (levels of compile-time width, so v stays in
// registers); v is overwritten.
template <int N, int M>
__device__ __forceinline__ float tree_max(float (&v)[M]) {
  if constexpr (N == 1) {
    return v[0];
  } else {
#pragma unroll
    for (int j = 0; j < N / 2; ++j) v[j] = fmaxf(v[j], v[N - 1 - j]);
    return tree_max<(N + 1) / 2>(v);
  }
}

// Online softmax of one key block (the arithmetic of v1, O's rescale left to the caller):
// mask where needed, raw-score row maxima, new running max, alpha, l rescaled, and P (fp32,
// unrounded) written over the scores with its row sums added to l.
// kWindow: the tile is one a sliding window cuts (v1.2's kWin form): the mask is window_mask.cuh's
// (win: the warp's rows), which may hide keys on a block's left too and every key of a block
// from some rows (their row maximum is then -inf: m_new = m keeps alpha = 1 and P = 0, or, for a
// row that has seen no key yet, m stays -inf, alpha = 1 and P = 2^(-inf) = 0, so the row's m, l
// and O come out unchanged, as the CPU reference's skip of such a row leaves them). Otherwise
// the causal / request-end mask of v1 (win unused), unchanged: the same decisions and bits.
template <int kBn, bool kTreeMax = true, bool kWindow = false>
__device__ __forceinline__ void softmax_block(float (&sc)[kBn / 2], float (&m)[2], float (&l)[2],
                                              float (&alpha)[2], int k0, int len, bool causal,
                                              int q_row0, int g, int t, float scale_log2,
                                              const RowsWindow &win = RowsWindow{}) {
  const float neg_inf = -__int_as_float(0x7f800000);
  const BlockMask<kBn> wm(win, k0, len);  // (kWindow only)
  const bool need_mask = kWindow ? wm.any() : (k0 + kBn > len || (causal && k0 + kBn - 1 > q_row0));
  float row_max[2] = {neg_inf, neg_inf};
  if constexpr (kTreeMax) {
    if (need_mask) {
      const int key_limit = min(len - k0, kBn);
      const int diag = q_row0 - k0;  // key (block-relative) <= diag + row
#pragma unroll
      for (int i = 0; i < kBn / 2; ++i) {
        const int row = g + ((i >> 1) & 1) * 8;
        const int key = (i >> 2) * 8 + 2 * t + (i & 1);
        const bool masked =
            kWindow ? wm.masked(row, key) : (key >= key_limit || (causal && key > diag + row));
        if (masked) sc[i] = neg_inf;
      }
    }
    // Row maxima as a tree (depth log2(kBn / 4) instead of a chain of kBn / 4 dependent
    // maxima): fmaxf ignores NaN and the hardware orders -0 below +0, so the maximum does not
    // depend on the order it is taken in: the result is the chain's (the final fmaxf with -inf
    // keeps the chain's -inf, not NaN, for a row of NaN). Row r's values are sc[4 q + 2 r + e].
    // Session 26: +0.4-2.9% at D 128 (forward protocol, two runs each); at D 64 with three
    // consumers (160 registers) 0.2-1.3% slower, so they keep the chain.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float v[kBn / 4];
#pragma unroll
      for (int q = 0; q < kBn / 8; ++q) {
        v[2 * q] = sc[4 * q + 2 * r];
        v[2 * q + 1] = sc[4 * q + 2 * r + 1];
      }
      row_max[r] = fmaxf(tree_max<kBn / 4>(v), neg_inf);
    }
  } else if (need_mask) {
    const int key_limit = min(len - k0, kBn);
    const int diag = q_row0 - k0;
#pragma unroll
    for (int i = 0; i < kBn / 2; ++i) {
      const int row = g + ((i >> 1) & 1) * 8;
      const int key = (i >> 2) * 8 + 2 * t + (i & 1);
      const bool masked =
          kWindow ? wm.masked(row, key) : (key >= key_limit || (causal && key > diag + row));
      if (masked) sc[i] = neg_inf;
      row_max[(i >> 1) & 1] = fmaxf(row_max[(i >> 1) & 1], sc[i]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kBn / 2; ++i) row_max[(i >> 1) & 1] = fmaxf(row_max[(i >> 1) & 1], sc[i]);
  }
  float m_use[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    row_max[i] = fmaxf(row_max[i], __shfl_xor_sync(0xffffffffu, row_max[i], 1));
    row_max[i] = fmaxf(row_max[i], __shfl_xor_sync(0xffffffffu, row_max[i], 2));
    const float m_new = fmaxf(m[i], row_max[i] * scale_log2);
    // A row with every key so far masked keeps m = -inf, l = 0, acc = 0; its P is 0.
    alpha[i] = m_new == neg_inf ? 1.0f : (m[i] == neg_inf ? 0.0f : fast_exp2(m[i] - m_new));
    m[i] = m_new;
    m_use[i] = m_new == neg_inf ? 0.0f : m_new;
    l[i] *= alpha[i];
  }
#pragma unroll
  for (int i = 0; i < kBn / 2; ++i) {
    const float pij = fast_exp2(__fmaf_rn(sc[i], scale_log2, -m_use[(i >> 1) & 1]));
    sc[i] = pij;
    l[(i >> 1) & 1] += pij;
  }
}

// Attention sinks (the kSinks instances of v1.2; forward_v0.cu has its own copy for its fragment
// layout): the sink of base-2 logit s2 (= sinks[h] log2 e) joins the rows' softmax once, after the
// tile's last key block, as the CPU reference's add_sink does: m_new = max(m, s2), the sum and O
// rescaled by alpha = 2^(m - m_new), 2^(s2 - m_new) added to the sum only (the sink gives no
// value), m = m_new. l must hold the row's whole sum (reduced over the quad): every lane of the
// quad then adds the same sink term to the same sum, so the row takes the sink once, and the
// quad's lanes keep equal m and l. alpha is exactly 1 where m_new == m (a sink at or below the
// row's max: O is left as it was, and a sink of -inf leaves the sum too, l + 2^-inf = l + 0 = l);
// a row that has seen no key (m = -inf: only rows past a request's end, never stored) gets
// alpha = 2^-inf = 0, and with a sink of -inf too keeps m = -inf, l = 0 (m_use 0 keeps the NaN of
// -inf - -inf out).
// `o` holds the accumulator in wgmma's layout: o[i] belongs to row (i >> 1) & 1.
template <int N>
__device__ __forceinline__ void add_sink(float s2, float (&m)[2], float (&l)[2], float (&o)[N]) {
  const float neg_inf = -__int_as_float(0x7f800000);
  float alpha[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float m_new = fmaxf(m[i], s2);
    alpha[i] = m_new == m[i] ? 1.0f : fast_exp2(m[i] - m_new);
    const float m_use = m_new == neg_inf ? 0.0f : m_new;
    // (Not contracted into an fma: the reference rounds the product, then the sum.)
    l[i] = __fadd_rn(__fmul_rn(l[i], alpha[i]), fast_exp2(s2 - m_use));
    m[i] = m_new;
  }
#pragma unroll
  for (int i = 0; i < N; ++i) o[i] *= alpha[(i >> 1) & 1];
}

template <int D, class Tag, bool kPingPong>
__global__ void __launch_bounds__(kThreads, 1)
    forward_v11_kernel(const fold_attn_problem_t p, const __grid_constant__ CUtensorMap tm_q,
                       const __grid_constant__ CUtensorMap tm_k,
                       const __grid_constant__ CUtensorMap tm_v, const CoordMuls muls,
                       const fold_tensor_t out, float *__restrict__ lse, const TileOrder order) {
  using C = Cfg<D, V11Stages<D>::value>;
  using T = typename Tag::T;
  constexpr int kBm = C::kBm, kBn = C::kBn, kDp = C::kDp, kStages = C::kStages;
  extern __shared__ unsigned char smem_raw[];
  unsigned char *smem = reinterpret_cast<unsigned char *>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~static_cast<uintptr_t>(1023));
  unsigned char *q_s = smem;
  unsigned char *k_s = q_s + C::kQBytes;             // stage s at k_s + s kKvBytes
  unsigned char *v_s = k_s + kStages * C::kKvBytes;  // stage s at v_s + s kKvBytes
  auto *bars = reinterpret_cast<uint64_t *>(v_s + kStages * C::kKvBytes);
  uint64_t *q_full = bars;
  uint64_t *k_full = bars + 1;
  uint64_t *v_full = k_full + kStages;
  uint64_t *k_empty = v_full + kStages;
  uint64_t *v_empty = k_empty + kStages;

  // The tile of linear index blockIdx.x (tile_order.cuh); y = 0 is every request's last
  // query block when causal (most keys).
  int y, b, h;
  order.decode(blockIdx.x, y, b, h);
  const Request r = request_of(p, b);
  const int n_qblocks = (r.len + kBm - 1) / kBm;
  const int qb = p.causal ? n_qblocks - 1 - y : y;
  if (qb < 0 || qb >= n_qblocks) return;  // uniform over the CTA, before any barrier
  const int q0 = qb * kBm;
  const int hk = h / (p.n_heads / p.n_kv_heads);
  const int k_end = p.causal ? min(r.len, q0 + kBm) : r.len;
  const int n_kblocks = (k_end + kBn - 1) / kBn;  // >= 1
  const bool dense = p.cu_seqlens == nullptr;
  const int32_t row_base = dense ? 0 : static_cast<int32_t>(r.first);
  const int32_t batch = dense ? b : 0;

  if (threadIdx.x == 0) {
    hw::mbar_init(q_full, 1);
    for (int s = 0; s < kStages; ++s) {
      hw::mbar_init(&k_full[s], 1);
      hw::mbar_init(&v_full[s], 1);
      hw::mbar_init(&k_empty[s], kConsumerWarps);
      hw::mbar_init(&v_empty[s], kConsumerWarps);
    }
    hw::fence_barrier_init();
  }
  __syncthreads();

  const int wg = hw::warpgroup_index();
  if (wg == 0) {
    // ---- producer ----
    hw::setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x == 0) {
      hw::tma_prefetch_descriptor(&tm_q);
      hw::tma_prefetch_descriptor(&tm_k);
      hw::tma_prefetch_descriptor(&tm_v);
      hw::mbar_arrive_expect_tx(q_full, C::kQBytes);
#pragma unroll
      for (int pn = 0; pn < C::kPanels; ++pn)
        hw::tma_load_4d(q_s + pn * C::kQPanel, &tm_q, q_full, pn * 64, h * muls.q_head,
                        row_base + q0, batch * muls.q_batch);
      // K_0, then K_j before V_{j-1}, then V_{n-1}: the consumers' order of use.
      auto load = [&](const CUtensorMap *tm, unsigned char *tiles, uint64_t *full, uint64_t *empty,
                      int head, int bmul, int j) {
        const int s = j % kStages;
        const int use = j / kStages;
        if (use > 0) hw::mbar_wait(&empty[s], (use - 1) & 1);
        hw::mbar_arrive_expect_tx(&full[s], C::kKvBytes);
#pragma unroll
        for (int pn = 0; pn < C::kPanels; ++pn)
          hw::tma_load_4d(tiles + s * C::kKvBytes + pn * C::kKvPanel, tm, &full[s], pn * 64, head,
                          row_base + j * kBn, batch * bmul);
      };
      load(&tm_k, k_s, k_full, k_empty, hk * muls.k_head, muls.k_batch, 0);
      for (int j = 1; j < n_kblocks; ++j) {
        load(&tm_k, k_s, k_full, k_empty, hk * muls.k_head, muls.k_batch, j);
        load(&tm_v, v_s, v_full, v_empty, hk * muls.v_head, muls.v_batch, j - 1);
      }
      load(&tm_v, v_s, v_full, v_empty, hk * muls.v_head, muls.v_batch, n_kblocks - 1);
    }
    return;
  }

  // ---- consumers ----
  hw::setmaxnreg_inc<kConsumerRegs>();
  const int cw = wg - 1;  // rows 64 cw .. 64 cw + 63 of the block
  const int tid = hw::thread_in_warpgroup();
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int r0 = 64 * cw + 16 * warp;  // the warp's first row in the block
  const float scale_log2 = p.softmax_scale * kLog2e;
  const float neg_inf = -__int_as_float(0x7f800000);
  const uint32_t q_addr = hw::smem_u32(q_s) + cw * 64 * 128;
  const uint32_t k_addr = hw::smem_u32(k_s);
  const uint32_t v_addr = hw::smem_u32(v_s);
  const int my_turn = kPingPongBarrier + cw, other_turn = kPingPongBarrier + (1 - cw);

  float o[kDp / 2];
#pragma unroll
  for (int i = 0; i < kDp / 2; ++i) o[i] = 0.0f;
  float m[2] = {neg_inf, neg_inf}, l[2] = {0.0f, 0.0f};  // rows g, g + 8 (l: lane-partial)
  float alpha[2];
  float sc[kBn / 2];
  uint32_t pa[kBn / 16][4];

  // S = Q K^T into sc (k-steps over the real D only: columns past D are zeros in both).
  auto issue_s = [&](int s) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t off = static_cast<uint32_t>(kk % 4) * 32u;  // k16 step inside a panel
      const uint64_t da = hw::desc_k_major_sw128(q_addr + (kk / 4) * C::kQPanel + off);
      const uint64_t db =
          hw::desc_k_major_sw128(k_addr + s * C::kKvBytes + (kk / 4) * C::kKvPanel + off);
      hw::wgmma_ss<kBn, T, 0, 0>(sc, da, db, kk > 0 ? 1 : 0);
    }
    hw::commit();
  };
  // O += P V (V MN-major: panel stride kKvPanel, k16 step = 16 rows = 2048 bytes).
  auto issue_pv = [&](int s) {
#pragma unroll
    for (int kt = 0; kt < kBn / 16; ++kt) {
      const uint64_t dv =
          hw::desc_mn_major_sw128(v_addr + s * C::kKvBytes + kt * 2048u, C::kKvPanel);
      hw::wgmma_rs<kDp, T, 1>(o, pa[kt], dv, 1);
    }
    hw::commit();
  };
  auto pack_p = [&]() {
#pragma unroll
    for (int kt = 0; kt < kBn / 16; ++kt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        pa[kt][e] = pack2(sc[8 * kt + 2 * e], sc[8 * kt + 2 * e + 1], Tag{});
  };
  auto fence_pa = [&]() {
#pragma unroll
    for (int kt = 0; kt < kBn / 16; ++kt)
#pragma unroll
      for (int e = 0; e < 4; ++e) hw::fence_operand(pa[kt][e]);
  };
  // The issue turn: consumer 0's first needs no token, consumer 1's last passes none.
  // (kPingPong false: no turns, the consumers issue whenever they are ready; a switch for
  // timing the two overlaps apart.)
  auto turn_begin = [&](bool first) {
    if (kPingPong && !(first && cw == 0)) hw::named_bar_sync(my_turn, kConsumerThreads);
  };
  auto turn_end = [&](bool last) {
    if (kPingPong && !(last && cw == 1)) hw::named_bar_arrive(other_turn, kConsumerThreads);
  };
  auto release = [&](uint64_t *bar) {
    if (lane == 0) hw::mbar_arrive(bar);
  };

  hw::mbar_wait(q_full, 0);
  // Block 0: S only.
  hw::mbar_wait(&k_full[0], 0);
  turn_begin(true);
  hw::fence();
  issue_s(0);
  turn_end(n_kblocks == 1);
  hw::wait<0>();
  hw::fence_operands(sc);
  release(&k_empty[0]);
  softmax_block<kBn>(sc, m, l, alpha, 0, r.len, p.causal, q0 + r0, g, t, scale_log2);
#pragma unroll
  for (int i = 0; i < kDp / 2; ++i) o[i] *= alpha[(i >> 1) & 1];
  pack_p();

  for (int j = 1; j < n_kblocks; ++j) {
    const int s = j % kStages, sp = (j - 1) % kStages;
    // Both operands first, so a turn is only issue (and one wgmma.fence covers both GEMMs).
    // Block j - 1 < n_kblocks - 1 ends before the request does: no V rows to zero.
    hw::mbar_wait(&k_full[s], (j / kStages) & 1);
    hw::mbar_wait(&v_full[sp], ((j - 1) / kStages) & 1);
    turn_begin(false);
    hw::fence();
    issue_s(s);
    issue_pv(sp);
    turn_end(j == n_kblocks - 1);
    hw::wait<1>();  // S_j done, P_{j-1} V_{j-1} may still run
    hw::fence_operands(sc);
    release(&k_empty[s]);
    softmax_block<kBn>(sc, m, l, alpha, j * kBn, r.len, p.causal, q0 + r0, g, t, scale_log2);
    hw::wait<0>();
    hw::fence_operands(o);
    fence_pa();
    release(&v_empty[sp]);
#pragma unroll
    for (int i = 0; i < kDp / 2; ++i) o[i] *= alpha[(i >> 1) & 1];
    pack_p();
  }

  // Last block's P V.
  {
    const int jl = n_kblocks - 1, sl = jl % kStages;
    const int k0 = jl * kBn;
    hw::mbar_wait(&v_full[sl], (jl / kStages) & 1);
    // (Both consumers reach the tail's barrier after their last turn.)
    if (k0 + kBn > r.len)
      zero_v_tail<C>(v_s + sl * C::kKvBytes, r.len - k0, cw * hw::kWarpgroupThreads + tid,
                     kConsumerThreads);
    hw::fence();
    issue_pv(sl);
    hw::wait<0>();
    hw::fence_operands(o);
    fence_pa();
  }

  // Epilogue: row sums, out = acc / l, lse = (m + log2 l) ln 2; rows past the end skipped.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
  }
  const float inv[2] = {1.0f / l[0], 1.0f / l[1]};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = q0 + r0 + g + 8 * i;
    if (row >= r.len) continue;
    T *dst = static_cast<T *>(out.data) + element_offset(p, out, b, r, row, h);
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
      *reinterpret_cast<uint32_t *>(dst + nt * 8 + 2 * t) =
          pack2(o[4 * nt + 2 * i] * inv[i], o[4 * nt + 2 * i + 1] * inv[i], Tag{});
    if (t == 0)
      lse[static_cast<int64_t>(h) * p.total_tokens + r.first + row] = (m[i] + __log2f(l[i])) * kLn2;
  }
}

// ---------------------------------------------------------------------------------------
// v1.2: v1.1 made persistent. grid = min(tiles, SMs) CTAs (1 CTA/SM: shared memory); each CTA
// walks the linear tile list of v1.1 (TileOrder: chunks of (request, head) pairs, y slowest
// inside a chunk, so each chunk's longest causal blocks come first) in a static
// boustrophedon order: in
// round k CTA c takes tile k G + c (k even) or k G + G - 1 - c (k odd), G = gridDim.x, so
// the long tiles of the early rounds are balanced by the short ones of the next. Static,
// so graph capture needs nothing reset. Idle tiles (query blocks past a request's end:
// seqlen is an upper bound under varlen) are skipped by every role alike.
// Per tile the consumers run v1.1's exact instruction sequence (o, m, l restart from
// 0 / -inf / 0), so with two consumers the bits are v1's (three, at D 64, run 192 x 128 tiles:
// their own bits, as invariant); only the pipeline state carries over: a CTA-wide
// key-block counter continues the K/V stages and parities across tiles, and Q has its own
// empty barrier, released (one arrival per consumer warp) as soon as the tile's last S is
// done. The producer therefore issues the next tile's K_0, Q, K_1, V_0, ... while the
// consumers still run the current tile's last P V and epilogue.
// Ping-pong turns: per tile as v1.1, in a ring of NC consumers (consumer c arrives on c + 1 mod
// NC; consumer 0's first turn takes no token, consumer NC - 1's last passes none). Across tiles
// no arrival can overtake a pending one: consumer 0 arrives on consumer 1's barrier in tile t+1
// only after Q(t+1) landed, which needs every consumer's Q release of tile t, each after its
// last turn of tile t.
// v1.2's tiles: 64 NC query rows (NC consumer warpgroups) by the plan's key block, or by 128 keys
// with three consumers (their 160 registers hold a 64 x 128 S, not the plan's 64 x 192 at D 64);
// 3 K / V stages where they fit, else 2.
template <int D, int NC>
struct V12Shape {
  static constexpr int kBm = 64 * NC;
  static constexpr int kBn = NC == 3 ? 128 : forward_plan(D).block_n;
  static constexpr int kDp = (D + 63) / 64 * 64;
  static constexpr int kBytes3 = 1024 + kBm * kDp * 2 + 2 * 3 * kBn * kDp * 2 + 8 * (2 + 4 * 3);
  static constexpr int kStages = kBytes3 <= 227 * 1024 ? 3 : 2;
};
// v1.2's epilogue (EPI): kEpiStg stores O from the accumulator layout with 4-byte global stores
// (32 per thread at D 128, each warp instruction touching 8 rows with 16 bytes each); kEpiShf
// first transposes the packed column pairs across each quad of lanes (which share their two
// rows) with two butterfly shuffles, so each lane holds 8 consecutive columns and stores them
// with one 16-byte store: a quarter of the store instructions, whole 32-byte sectors, and no
// shared memory (session 26, forward protocol A/B, graphed, L2 flushed: +3-10% at D 128, +1-2%
// at (8, 2048, 32/32, 64); O staged in shared memory for TMA stores measured slower:
// notes/training_kernels.md "Session 26"). The values stored are the same products either way:
// the same bits.
enum Epi { kEpiStg = 0, kEpiShf = 1 };
template <int D, int NC>
using V12Cfg = CfgT<D, V12Shape<D, NC>::kStages, V12Shape<D, NC>::kBm, V12Shape<D, NC>::kBn>;
// Consumer registers: 128 x 24 + 256 x 240 = 64512 (two consumers), 128 x 24 + 384 x 160 = 64512
// (three) <= 65536.
// With the K / V scan (kScan) the producer warpgroup keeps more (its scan warps hold four 16-byte
// loads in flight): 128 x 40 + 256 x 232 = 64512 (two consumers), 128 x 32 + 384 x 160 = 65536.
template <int NC, bool kScan = false>
struct V12ConsumerRegs {
  static constexpr int value = NC == 3 ? 160 : (kScan ? 232 : 240);
};
template <int NC, bool kScan>
struct V12ProducerRegs {
  static constexpr int value = !kScan ? kProducerRegs : (NC == 3 ? 32 : 40);
};

// kWindow: the instance for calls whose sliding window can mask something (launch_v12_epi); the
// others are compiled as they were before windows existed (no window code at all: the same SASS).
// kSinks: the instance for calls with attention sinks (p.sinks != nullptr; add_sink in the
// epilogue of every tile with rows, kFull / kHalf / kWin); without it the code is the one of
// before sinks existed.
template <int D, class Tag, int NC, int EPI, bool kScan, bool kWindow, bool kSinks>
__global__ void __launch_bounds__((NC + 1) * hw::kWarpgroupThreads, 1)
    forward_v12_kernel(const fold_attn_problem_t p, const __grid_constant__ CUtensorMap tm_q,
                       const __grid_constant__ CUtensorMap tm_k,
                       const __grid_constant__ CUtensorMap tm_v, const CoordMuls muls,
                       const fold_tensor_t out, float *__restrict__ lse, const uint32_t n_tiles,
                       const TileOrder order, const int trim, uint32_t *__restrict__ kv_bounds) {
  using C = V12Cfg<D, NC>;
  using T = typename Tag::T;
  constexpr int kCThreads = NC * hw::kWarpgroupThreads, kCWarps = NC * 4;
  constexpr int kBm = C::kBm, kBn = C::kBn, kDp = C::kDp, kStages = C::kStages;
  extern __shared__ unsigned char smem_raw[];
  unsigned char *smem = reinterpret_cast<unsigned char *>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~static_cast<uintptr_t>(1023));
  unsigned char *q_s = smem;
  unsigned char *k_s = q_s + C::kQBytes;             // stage s at k_s + s kKvBytes
  unsigned char *v_s = k_s + kStages * C::kKvBytes;  // stage s at v_s + s kKvBytes
  auto *bars = reinterpret_cast<uint64_t *>(v_s + kStages * C::kKvBytes);
  uint64_t *q_full = bars;
  uint64_t *k_full = bars + 1;
  uint64_t *v_full = k_full + kStages;
  uint64_t *k_empty = v_full + kStages;
  uint64_t *v_empty = k_empty + kStages;
  uint64_t *q_empty = v_empty + kStages;  // the 8 bytes v1.2 adds

  if (threadIdx.x == 0) {
    hw::mbar_init(q_full, 1);
    hw::mbar_init(q_empty, kCWarps);
    for (int s = 0; s < kStages; ++s) {
      hw::mbar_init(&k_full[s], 1);
      hw::mbar_init(&v_full[s], 1);
      // (+ 3: the producer's scan warps, when the forward takes the K / V bounds)
      hw::mbar_init(&k_empty[s], kCWarps + (kScan ? kScanWarps : 0));
      hw::mbar_init(&v_empty[s], kCWarps + (kScan ? kScanWarps : 0));
    }
    hw::fence_barrier_init();
  }
  __syncthreads();

  const bool dense = p.cu_seqlens == nullptr;
  const uint32_t grid = gridDim.x;
  const uint32_t rounds = (n_tiles + grid - 1) / grid;

  // The tile of round k for this CTA, decoded as v1.1 decodes blockIdx.x; false if none or
  // idle. Every role calls it with the same k, so all see the same tile sequence, and the same
  // key blocks: k_first, k_first + 1, .., k_first + n_kblocks - 1 (request-relative block
  // indices; pipeline block j of the tile is key block k_first + j).
  // A tile a sliding window cuts (`cut`: window_mask.cuh's window_cuts) takes the blocks that
  // can hold a key its rows see, as the CPU reference does (visible_keys, its first key rounded
  // down to a block start: blocks stay aligned to the request's start); every other tile, and
  // every tile of a call without a window, takes [0, k_end) as before (k_first = 0).
  struct Tile {
    Request r;
    int h, hk, b, q0, k_first, n_kblocks;
    bool cut;
    int32_t row_base, batch;
  };
  auto tile_of = [&](uint32_t k, Tile &tl) -> bool {
    const uint32_t idx = k * grid + ((k & 1u) ? grid - 1u - blockIdx.x : blockIdx.x);
    if (idx >= n_tiles) return false;
    int y;
    order.decode(idx, y, tl.b, tl.h);
    tl.r = request_of(p, tl.b);
    const int n_qblocks = (tl.r.len + kBm - 1) / kBm;
    const int qb = p.causal ? n_qblocks - 1 - y : y;
    if (qb < 0 || qb >= n_qblocks) return false;
    tl.q0 = qb * kBm;
    tl.hk = tl.h / (p.n_heads / p.n_kv_heads);
    const int k_end = p.causal ? min(tl.r.len, tl.q0 + kBm) : tl.r.len;
    tl.k_first = 0;
    tl.n_kblocks = (k_end + kBn - 1) / kBn;  // >= 1
    tl.cut = false;
    if constexpr (kWindow) {
      const int q1 = min(tl.r.len, tl.q0 + kBm);
      tl.cut = window_cuts(p, tl.q0, q1, tl.r.len);
      // (Every row sees its own key: the blocks hold [q0, q1), so n_kblocks >= 1.)
      if (tl.cut) visible_key_blocks<kBn>(p, tl.q0, q1, tl.r.len, &tl.k_first, &tl.n_kblocks);
    }
    tl.row_base = dense ? 0 : static_cast<int32_t>(tl.r.first);
    tl.batch = dense ? tl.b : 0;
    return true;
  };

  const int wg = hw::warpgroup_index();
  if (wg == 0) {
    // ---- producer ----
    hw::setmaxnreg_dec<V12ProducerRegs<NC, kScan>::value>();
    if (threadIdx.x == 0) {
      hw::tma_prefetch_descriptor(&tm_q);
      hw::tma_prefetch_descriptor(&tm_k);
      hw::tma_prefetch_descriptor(&tm_v);
      uint32_t it = 0;     // key blocks loaded so far (K/V stage and parity, CTA-wide)
      uint32_t tiles = 0;  // tiles done so far (Q parity)
      for (uint32_t k = 0; k < rounds; ++k) {
        Tile tl;
        if (!tile_of(k, tl)) continue;
        auto load = [&](const CUtensorMap *tm, unsigned char *tiles_s, uint64_t *full,
                        uint64_t *empty, int head, int bmul, int j) {
          const uint32_t n = it + static_cast<uint32_t>(j);
          const uint32_t s = n % kStages;
          const uint32_t use = n / kStages;
          if (use > 0) hw::mbar_wait(&empty[s], (use - 1) & 1);
          hw::mbar_arrive_expect_tx(&full[s], C::kKvBytes);
#pragma unroll
          for (int pn = 0; pn < C::kPanels; ++pn)
            hw::tma_load_4d(tiles_s + s * C::kKvBytes + pn * C::kKvPanel, tm, &full[s], pn * 64,
                            head, tl.row_base + (tl.k_first + j) * kBn, tl.batch * bmul);
        };
        const int kh = tl.hk * muls.k_head, vh = tl.hk * muls.v_head;
        // K_0 first (its stage frees early), then Q once the consumers' last S of the
        // previous tile is done, then K_j before V_{j-1}, then V_{n-1}.
        load(&tm_k, k_s, k_full, k_empty, kh, muls.k_batch, 0);
        if (tiles > 0) hw::mbar_wait(q_empty, (tiles - 1) & 1);
        hw::mbar_arrive_expect_tx(q_full, C::kQBytes);
#pragma unroll
        for (int pn = 0; pn < C::kPanels; ++pn)
          hw::tma_load_4d(q_s + pn * C::kQPanel, &tm_q, q_full, pn * 64, tl.h * muls.q_head,
                          tl.row_base + tl.q0, tl.batch * muls.q_batch);
        for (int j = 1; j < tl.n_kblocks; ++j) {
          load(&tm_k, k_s, k_full, k_empty, kh, muls.k_batch, j);
          load(&tm_v, v_s, v_full, v_empty, vh, muls.v_batch, j - 1);
        }
        load(&tm_v, v_s, v_full, v_empty, vh, muls.v_batch, tl.n_kblocks - 1);
        it += static_cast<uint32_t>(tl.n_kblocks);
        ++tiles;
      }
    } else if (kScan && threadIdx.x >= 32) {
      // Warps 1-3, idle otherwise: max|K| and max|V| for the backward (kv_bounds.cuh), read
      // from the stages as a third party of the pipeline: they wait for every K / V stage
      // fill, as the consumers do, and release it with one arrival per warp (the empty
      // barriers count them), so the producer refills no stage before they are done with it.
      // Each (request, KV head)'s keys are read once: key block j by the tile of the group's
      // first head whose query block holds row j kBn (self-attention: the tile loads it; with a
      // sliding window too, as every row sees its own key: k_first kBn <= q0 <= j kBn and
      // j kBn < q1 <= k_hi). j_lo, j_hi and take's j count pipeline blocks (key block
      // k_first + j).
      const int group = p.n_heads / p.n_kv_heads;
      const int tid = static_cast<int>(threadIdx.x) - 32;
      uint32_t it = 0;  // key blocks consumed so far (stage / parity, as the producer's)
      // (k * grid < n_tiles rather than k < rounds: with rounds live here too, the producer's
      // registers (24 when this was written) spilled it, and the consumers' copy with it.)
      for (uint32_t k = 0; k * grid < n_tiles; ++k) {
        Tile tl;
        if (!tile_of(k, tl)) continue;
        const int qb = tl.q0 / kBm;
        const int j_lo = tl.h % group == 0 ? (qb * kBm + kBn - 1) / kBn - tl.k_first : tl.n_kblocks;
        const int j_hi = min((qb * kBm + kBm + kBn - 1) / kBn - tl.k_first, tl.n_kblocks);
        // The request's keys from pipeline block 0 on (one value, not two, live in the loop:
        // with a window the scan warps' registers are tight enough for the difference to spill).
        const int keys_left = tl.r.len - tl.k_first * kBn;
        uint32_t mk = 0, mv = 0;
        // Key block j's K or V: wait for its fill, take the maxima if the block is this tile's,
        // release it. In the producer's order (K_0, then K_j before V_{j-1}, then V_{n-1}), so
        // that no release waits on a later fill (in block order K_{j+1} would wait for V_j).
        // What the scan costs the forward is the time it holds its own block's stages (session
        // 28: one scan warp instead of three was 6-30% slower; hence the grouped loads).
        auto take = [&](bool is_v, int j) {
          const uint32_t n = it + static_cast<uint32_t>(j);
          const uint32_t s = n % kStages;
          hw::mbar_wait(is_v ? &v_full[s] : &k_full[s], (n / kStages) & 1);
          if (j >= j_lo && j < j_hi) {
            const int rows = min(kBn, keys_left - j * kBn);
            const uint32_t tile = hw::smem_u32((is_v ? v_s : k_s) + s * C::kKvBytes);
            uint32_t &m = is_v ? mv : mk;
            m = tile_abs_max<C::kKvBytes, C::kKvPanel, 32 * kScanWarps>(tile, rows, tid, m);
          }
          __syncwarp();
          if ((threadIdx.x & 31) == 0) hw::mbar_arrive(is_v ? &v_empty[s] : &k_empty[s]);
        };
        take(false, 0);
        for (int j = 1; j < tl.n_kblocks; ++j) {
          take(false, j);
          take(true, j - 1);
        }
        take(true, tl.n_kblocks - 1);
        it += static_cast<uint32_t>(tl.n_kblocks);
        if (j_lo < j_hi) kv_bounds_publish<T>(mk, mv, kv_bounds, p, tl.b, tl.hk);
      }
    }
    return;
  }

  // ---- consumers ----
  hw::setmaxnreg_inc<V12ConsumerRegs<NC, kScan>::value>();
  const int cw = wg - 1;  // rows 64 cw .. 64 cw + 63 of the block
  const int tid = hw::thread_in_warpgroup();
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int r0 = 64 * cw + 16 * warp;  // the warp's first row in the block
  const float scale_log2 = p.softmax_scale * kLog2e;
  const float neg_inf = -__int_as_float(0x7f800000);
  const uint32_t q_addr = hw::smem_u32(q_s) + cw * 64 * 128;
  const uint32_t k_addr = hw::smem_u32(k_s);
  const uint32_t v_addr = hw::smem_u32(v_s);
  const int my_turn = kPingPongBarrier + cw, other_turn = kPingPongBarrier + (cw + 1) % NC;

  float o[kDp / 2];
  float m[2], l[2];  // rows g, g + 8 (l: lane-partial)
  float alpha[2];
  float sc[kBn / 2];
  uint32_t pa[kBn / 16][4];

  // S = Q K^T into sc (k-steps over the real D only: columns past D are zeros in both).
  auto issue_s = [&](uint32_t s) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t off = static_cast<uint32_t>(kk % 4) * 32u;  // k16 step inside a panel
      const uint64_t da = hw::desc_k_major_sw128(q_addr + (kk / 4) * C::kQPanel + off);
      const uint64_t db =
          hw::desc_k_major_sw128(k_addr + s * C::kKvBytes + (kk / 4) * C::kKvPanel + off);
      hw::wgmma_ss<kBn, T, 0, 0>(sc, da, db, kk > 0 ? 1 : 0);
    }
    hw::commit();
  };
  // O += P V (V MN-major: panel stride kKvPanel, k16 step = 16 rows = 2048 bytes) over the
  // block's first `keys` keys (a std::integral_constant: kBn, or kBn / 2 for a half block).
  auto issue_pv = [&](uint32_t s, auto keys) {
#pragma unroll
    for (int kt = 0; kt < decltype(keys)::value / 16; ++kt) {
      const uint64_t dv =
          hw::desc_mn_major_sw128(v_addr + s * C::kKvBytes + kt * 2048u, C::kKvPanel);
      hw::wgmma_rs<kDp, T, 1>(o, pa[kt], dv, 1);
    }
    hw::commit();
  };
  auto pack_p = [&]() {
#pragma unroll
    for (int kt = 0; kt < kBn / 16; ++kt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        pa[kt][e] = pack2(sc[8 * kt + 2 * e], sc[8 * kt + 2 * e + 1], Tag{});
  };
  auto fence_pa = [&]() {
#pragma unroll
    for (int kt = 0; kt < kBn / 16; ++kt)
#pragma unroll
      for (int e = 0; e < 4; ++e) hw::fence_operand(pa[kt][e]);
  };
  auto turn_begin = [&](bool first) {
    if (!(first && cw == 0)) hw::named_bar_sync(my_turn, 2 * hw::kWarpgroupThreads);
  };
  auto turn_end = [&](bool last) {
    if (!(last && cw == NC - 1)) hw::named_bar_arrive(other_turn, 2 * hw::kWarpgroupThreads);
  };
  auto release = [&](uint64_t *bar) {
    if (lane == 0) hw::mbar_arrive(bar);
  };

  // A tile's consumer work in one of four forms (compile-time, so that the code between each
  // wgmma.fence and its commit stays straight-line: runtime branches there, or S written into
  // half of sc, made ptxas serialise the wgmma, C7515): kFull; kHalf, whose last key block has
  // at most half its keys in range (a request's last block, or a causal tile's diagonal block
  // past its last row): its P V runs over the first kBn / 2 keys only (the skipped keys are
  // masked, so their P is 0 and the terms left out are exact zeros: o + 0 = o); kIdle, a
  // consumer whose 64 rows all lie past the request's end (the last tile of a request whose
  // length is not a multiple of the tile's rows): no GEMM, no softmax and no output, only its
  // waits, turns, releases and its share of the V tail; kWin, a tile a sliding window cuts
  // (tl.cut): kFull's sequence over the key blocks from tl.k_first on, with the window's mask
  // (softmax_block's kWindow). kFull and kHalf run only on tiles the window does not cut, whose
  // blocks start at key 0, so their code is the one of a call without a window; kHalf is not
  // used for cut tiles (a separate copy for them would buy little). Which form a tile takes
  // depends on its request's own length and the call's window only (FOLD_FWD_TRIM=0: kFull or
  // kWin).
  enum Form { kFull, kHalf, kIdle, kWin };
  auto run_tile = [&](const Tile &tl, uint32_t it, uint32_t tiles, auto form_tag) {
    constexpr int kForm = decltype(form_tag)::value;
    const Request &r = tl.r;
    const int q0 = tl.q0, n_kblocks = tl.n_kblocks;
    // The first key of pipeline block 0 (request-relative). kIdle can run on a cut tile too,
    // and needs it for the V tail; kFull and kHalf see only tiles whose blocks start at 0.
    const int kb0 = kForm == kWin || (kWindow && kForm == kIdle) ? tl.k_first * kBn : 0;
    // The window of this warp's 16 rows (kWin only).
    const RowsWindow win = kForm == kWin ? rows_window(p, q0 + r0) : RowsWindow{};
    if constexpr (kForm != kIdle) {
#pragma unroll
      for (int i = 0; i < kDp / 2; ++i) o[i] = 0.0f;
      m[0] = m[1] = neg_inf;
      l[0] = l[1] = 0.0f;
    }

    hw::mbar_wait(q_full, tiles & 1);
    // Block 0: S only.
    {
      const uint32_t s0 = it % kStages;
      hw::mbar_wait(&k_full[s0], (it / kStages) & 1);
      turn_begin(true);
      if constexpr (kForm != kIdle) {
        hw::fence();
        issue_s(s0);
      }
      turn_end(n_kblocks == 1);
      if constexpr (kForm != kIdle) {
        hw::wait<0>();
        hw::fence_operands(sc);
      }
      release(&k_empty[s0]);
      if (n_kblocks == 1) release(q_empty);
    }
    if constexpr (kForm != kIdle) {
      softmax_block<kBn, NC == 2, kForm == kWin>(sc, m, l, alpha, kb0, r.len, p.causal, q0 + r0, g,
                                                 t, scale_log2, win);
#pragma unroll
      for (int i = 0; i < kDp / 2; ++i) o[i] *= alpha[(i >> 1) & 1];
      pack_p();
    }

    for (int j = 1; j < n_kblocks; ++j) {
      const uint32_t n = it + static_cast<uint32_t>(j);
      const uint32_t s = n % kStages, sp = (n - 1) % kStages;
      // Both operands first, so a turn is only issue (one wgmma.fence covers both GEMMs).
      // Block j - 1 < n_kblocks - 1 ends before the request does: no V rows to zero.
      hw::mbar_wait(&k_full[s], (n / kStages) & 1);
      hw::mbar_wait(&v_full[sp], ((n - 1) / kStages) & 1);
      turn_begin(false);
      if constexpr (kForm != kIdle) {
        hw::fence();
        issue_s(s);
        issue_pv(sp, std::integral_constant<int, kBn>{});
      }
      turn_end(j == n_kblocks - 1);
      if constexpr (kForm != kIdle) {
        hw::wait<1>();  // S_j done, P_{j-1} V_{j-1} may still run
        hw::fence_operands(sc);
      }
      release(&k_empty[s]);
      if (j == n_kblocks - 1) release(q_empty);  // the tile's last S: Q is free
      if constexpr (kForm != kIdle) {
        softmax_block<kBn, NC == 2, kForm == kWin>(sc, m, l, alpha, kb0 + j * kBn, r.len, p.causal,
                                                   q0 + r0, g, t, scale_log2, win);
        hw::wait<0>();
        hw::fence_operands(o);
        fence_pa();
      }
      release(&v_empty[sp]);
      if constexpr (kForm != kIdle) {
#pragma unroll
        for (int i = 0; i < kDp / 2; ++i) o[i] *= alpha[(i >> 1) & 1];
        pack_p();
      }
    }

    // The tile's head's sink (base 2), read once per tile and only by forms with rows (kIdle never
    // reads it); issued before the last P V's wait, so that its latency runs under that GEMM.
    [[maybe_unused]] float sink2 = 0.0f;
    // Last block's P V.
    {
      const int jl = n_kblocks - 1;
      const uint32_t n = it + static_cast<uint32_t>(jl);
      const uint32_t sl = n % kStages;
      const int k0 = kb0 + jl * kBn;
      hw::mbar_wait(&v_full[sl], (n / kStages) & 1);
      // (Every consumer, idle ones included, reaches the tail's barrier after its last turn.)
      if (k0 + kBn > r.len)
        zero_v_tail<C>(v_s + sl * C::kKvBytes, r.len - k0, cw * hw::kWarpgroupThreads + tid,
                       kCThreads);
      if constexpr (kForm != kIdle) {
        hw::fence();
        issue_pv(sl, std::integral_constant < int, kForm == kHalf ? kBn / 2 : kBn > {});
        if constexpr (kSinks) sink2 = __ldg(p.sinks + tl.h) * kLog2e;
        hw::wait<0>();
        hw::fence_operands(o);
        fence_pa();
      }
      release(&v_empty[sl]);  // the stage goes back to the producer (next tile)
    }
    if constexpr (kForm != kIdle) {

      // Epilogue: row sums, out = acc / l, lse = (m + log2 l) ln 2; rows past the end skipped.
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
      }
      // The sink, once per row (l is the row's whole sum now), before the division and the LSE.
      if constexpr (kSinks) add_sink(sink2, m, l, o);
      const float inv[2] = {1.0f / l[0], 1.0f / l[1]};
      if constexpr (EPI == kEpiShf) {
        // Lane t of a quad holds the column pair 2 t of each 8-column group; two butterfly
        // exchanges (lanes t ^ 2, then t ^ 1, two values each) leave it the 4 pairs of group
        // 4 c + t, i.e. 16 consecutive bytes. All lanes shuffle; only the stores are predicated
        // (a row past the request's end belongs to the next request or to no one).
        const bool hi = (t & 2) != 0, lo = (t & 1) != 0;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int row = q0 + r0 + g + 8 * i;
          T *dst = static_cast<T *>(out.data) + element_offset(p, out, tl.b, r, row, tl.h);
#pragma unroll
          for (int c = 0; c < D / 32; ++c) {
            uint32_t x[4];
#pragma unroll
            for (int j = 0; j < 4; ++j)
              x[j] = pack2(o[4 * (4 * c + j) + 2 * i] * inv[i],
                           o[4 * (4 * c + j) + 2 * i + 1] * inv[i], Tag{});
            uint32_t r0x = __shfl_xor_sync(0xffffffffu, hi ? x[0] : x[2], 2);
            uint32_t r1x = __shfl_xor_sync(0xffffffffu, hi ? x[1] : x[3], 2);
            // Selects, not x[hi ? 0 : 2]: a runtime index would put x in local memory.
            x[0] = hi ? r0x : x[0];
            x[1] = hi ? r1x : x[1];
            x[2] = hi ? x[2] : r0x;
            x[3] = hi ? x[3] : r1x;
            r0x = __shfl_xor_sync(0xffffffffu, lo ? x[0] : x[1], 1);
            r1x = __shfl_xor_sync(0xffffffffu, lo ? x[2] : x[3], 1);
            x[0] = lo ? r0x : x[0];
            x[1] = lo ? x[1] : r0x;
            x[2] = lo ? r1x : x[2];
            x[3] = lo ? x[3] : r1x;
            st_global_16_if(row < r.len, dst + (4 * c + t) * 8, make_uint4(x[0], x[1], x[2], x[3]));
          }
        }
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int row = q0 + r0 + g + 8 * i;
        if (row >= r.len) continue;
        if constexpr (EPI == kEpiStg) {
          T *dst = static_cast<T *>(out.data) + element_offset(p, out, tl.b, r, row, tl.h);
#pragma unroll
          for (int nt = 0; nt < D / 8; ++nt)
            *reinterpret_cast<uint32_t *>(dst + nt * 8 + 2 * t) =
                pack2(o[4 * nt + 2 * i] * inv[i], o[4 * nt + 2 * i + 1] * inv[i], Tag{});
        }
        if (t == 0)
          lse[static_cast<int64_t>(tl.h) * p.total_tokens + r.first + row] =
              (m[i] + __log2f(l[i])) * kLn2;
      }
    }
  };

  uint32_t it = 0;     // key blocks consumed so far (stage / parity, as the producer's)
  uint32_t tiles = 0;  // tiles done so far (Q parity)
  // (Not at D 256: its consumers sit at the register bound.)
  const bool trim_on = D <= 128 && trim != 0;
  for (uint32_t k = 0; k < rounds; ++k) {
    Tile tl;
    if (!tile_of(k, tl)) continue;
    const int k_end = p.causal ? min(tl.r.len, tl.q0 + kBm) : tl.r.len;
    if (trim_on && tl.q0 + 64 * cw >= tl.r.len)
      run_tile(tl, it, tiles, std::integral_constant<int, kIdle>{});
    else if (kWindow && tl.cut)
      run_tile(tl, it, tiles, std::integral_constant<int, kWin>{});
    else if (trim_on && k_end - (tl.n_kblocks - 1) * kBn <= kBn / 2)
      run_tile(tl, it, tiles, std::integral_constant<int, kHalf>{});
    else
      run_tile(tl, it, tiles, std::integral_constant<int, kFull>{});
    it += static_cast<uint32_t>(tl.n_kblocks);
    ++tiles;
  }
}

void check(cudaError_t err, const char *what) {
  if (err != cudaSuccess) fail(FOLD_ERR_CUDA, std::string(what) + ": " + cudaGetErrorString(err));
}

// Which forward kernel runs. Default: v1.2 (persistent). On the H200 (CUDA graphs) it was
// 3-24% faster than v1.1 on every causal benchmark shape (session 3: its longest-first tile
// walk keeps the SMs busy through the short diagonal tiles) and, with the chunked tile order,
// -2% to +13% on the training issue's non-causal shapes (session 6, protocol: +1, +2, +5, +5,
// -2, +13%, varlen +2%; benchmarks/results/session6/round1). FOLD_FWD_VARIANT overrides: "v1"
// (the previous kernel), "v1.1", "v1.1-nopp" (v1.1 without the ping-pong turns, to time the
// two overlaps apart), "v1.2" or "v1.2-2wg". Read at every call (a host getenv; graph capture
// records whichever kernel the captured call launched). The choice never depends on the batch.
// At D 64, v1.2 runs three consumer warpgroups on 192 x 128 tiles (session 24, forward protocol
// A/B, graphed, L2 flushed: +18.5% at (8, 2048, 32/32) non-causal, +6.1% causal, +10.8% / +9.9% at
// (2, 8192, 64/8); notes/training_kernels.md "Session 24"), so its bits differ from v1's there
// (each row's keys are summed in 128-key blocks, not the plan's 192), while "v1.2-2wg" keeps
// the two-warpgroup form on the plan's tiles; everywhere else every variant gives v1's bits
// (same tiles, same order of operations).
enum class Variant { kV1, kV11, kV11NoPingPong, kV12, kV12TwoConsumers };
Variant forward_variant() {
  const char *env = std::getenv("FOLD_FWD_VARIANT");
  if (env == nullptr || env[0] == '\0') return Variant::kV12;
  const std::string v(env);
  if (v == "v1" || v == "1") return Variant::kV1;
  if (v == "v1.1" || v == "1.1") return Variant::kV11;
  if (v == "v1.1-nopp") return Variant::kV11NoPingPong;
  if (v == "v1.2" || v == "1.2") return Variant::kV12;
  if (v == "v1.2-2wg") return Variant::kV12TwoConsumers;
  fail(FOLD_ERR_INVALID_ARGUMENT,
       "FOLD_FWD_VARIANT=" + v +
           ": expected v1, v1.1, v1.1-nopp (v1.1 without ping-pong), v1.2 (persistent) or "
           "v1.2-2wg (v1.2 with two consumer warpgroups at D 64)");
}

// The tile order's chunk (tile_order.cuh). Dense and non-causal, every tile has the same
// work: chunks of about two waves of tiles, so that the resident CTAs share a few heads' K / V
// in L2 (H200, graphed, L2 flushed: 484 -> 571 TFLOP/s at (8, 2048, 16/16, 128), within noise
// on the other shapes). Causal or varlen, tiles differ in length and the longest-first order
// over the whole batch balances the SMs better than L2 reuse gains: one chunk of everything
// (two-wave chunks measured 4-28% slower there), except dense causal MHA at D 128 and D 64 (below):
// there each head has its own K / V and one chunk of every pair runs up to one head per resident
// CTA, each query block re-reading its head's K / V from DRAM (ncu at (8, 2048, 16/16, 128): DRAM
// 69%, L2 hits 33%), so smaller chunks: half a wave of pairs (two query blocks of each head in
// flight) measured +12.8% there (session 21, protocol A/B, graphed, L2 flushed: 419.5 -> 473.1
// TFLOP/s), and at D 128 chunks of 4 heads a further +9% (session 27, below), while GQA shapes
// lost up to 16% (their groups already share K / V). FOLD_FWD_HB_CHUNK=n (read at
// every call) sets the target number of (request, head) pairs per chunk instead (for sweeps; 0 =
// one chunk). In units of one KV head's G query heads, so that a chunk never splits a group (its K
// / V would be read again by the next chunk); balanced, only the last chunk may be short.
// Scheduling only: the bits are the same for every choice. It depends on the batch, which an
// order may (never what a tile computes).
TileOrder tile_order(const fold_attn_problem_t &p, int64_t q_blocks) {
  const int64_t group = p.n_heads / p.n_kv_heads;
  const int64_t n_units = static_cast<int64_t>(p.batch) * p.n_kv_heads;
  const bool uniform = !p.causal && p.cu_seqlens == nullptr;
  // (Only with 16 query blocks or more, as measured: with fewer, half a wave of pairs is one or
  // two waves of tiles, where two-wave chunks lost to the longest-first order.)
  // At D 64 (192-row tiles since session 24) the same chunks measured +1.7% / +4.7% at (8, 2048,
  // 32/32) causal (session 25, two protocol A/B runs, graphed, L2 flushed; -1.7% in session 21 on
  // the 128-row tiles of then), so D 64 takes them too from S 2048 (11 query blocks there).
  const bool causal_mha =
      p.causal && p.cu_seqlens == nullptr && group == 1 &&
      ((p.head_dim == 128 && q_blocks >= 16) || (p.head_dim == 64 && p.seqlen >= 2048));
  // At D 128 chunks of 4 heads (session 27, two protocol A/B runs, graphed, L2 flushed: 1.089 /
  // 1.092 over half a wave at (8, 2048, 16/16, 128) causal; notes/training_kernels.md "Session
  // 27"): the CTAs' window of tiles spans a few heads' K / V, and the chunks' 64 tiles stay clear
  // of v1.2's static rounds of 132 CTAs. Not 8: 128 tiles per chunk, a hair under one round, put
  // each CTA on the same rank of every chunk's longest-first list (0.80, a cliff).
  constexpr int64_t kCausalMhaD128Heads = 4;
  int64_t target = uniform      ? (2 * sm_count() + q_blocks - 1) / std::max<int64_t>(q_blocks, 1)
                   : causal_mha ? (p.head_dim == 128 ? kCausalMhaD128Heads
                                                     : std::max<int64_t>(sm_count() / 2, 1))
                                : n_units * group;
  if (const char *env = std::getenv("FOLD_FWD_HB_CHUNK"); env != nullptr && env[0] != '\0') {
    char *end = nullptr;
    const long long n = std::strtoll(env, &end, 10);
    if (*end != '\0' || n < 0)
      fail(FOLD_ERR_INVALID_ARGUMENT, std::string("FOLD_FWD_HB_CHUNK=") + env +
                                          ": expected 0 (one chunk) or a positive integer");
    // Clamped before the rounding below, so that no value can overflow it.
    target = n > 0 ? std::min<long long>(n, n_units * group) : n_units * group;
  }
  target = std::clamp<int64_t>((target + group - 1) / group, 1, std::max<int64_t>(n_units, 1));
  const int64_t n_chunks = (n_units + target - 1) / target;
  const int64_t chunk = n_chunks > 0 ? (n_units + n_chunks - 1) / n_chunks : 1;
  return TileOrder{static_cast<uint32_t>(p.n_heads), static_cast<uint32_t>(n_units * group),
                   static_cast<uint32_t>(q_blocks), static_cast<uint32_t>(chunk * group)};
}

// A setting read from the environment at every call (for A/B runs): the index of its value in
// `values`, `fallback` when unset or empty; any other value is refused, naming the variable.
int env_choice(const char *name, std::initializer_list<const char *> values, int fallback) {
  const char *env = std::getenv(name);
  if (env == nullptr || env[0] == '\0') return fallback;
  const std::string v(env);
  std::string expected;
  int i = 0;
  for (const char *value : values) {
    if (v == value) return i;
    expected +=
        std::string(i == 0 ? "" : (i + 1 == static_cast<int>(values.size()) ? " or " : ", ")) +
        value;
    ++i;
  }
  fail(FOLD_ERR_INVALID_ARGUMENT, std::string(name) + "=" + v + ": expected " + expected);
}

// v1.2's trimmed tiles (the kernel's kHalf and kIdle forms), on by default (session 25, forward
// protocol A/B, graphed, L2 flushed: +1-2% on the D 64 causal shapes, whose 192-row tiles leave
// a consumer idle in a request's last tile and a half-empty diagonal block in every other tile;
// the bits are the same: notes/training_kernels.md "Session 25"). FOLD_FWD_TRIM=0 (read at every
// call) turns them off, for A/B runs.
bool forward_trim() { return env_choice("FOLD_FWD_TRIM", {"0", "1"}, 1) == 1; }

// v1.2's CTA count: FOLD_FWD_CTAS (read at every call, a positive integer) caps it, so that
// the tests can make a few CTAs walk many tiles (the cross-tile pipeline state); unset = the
// SM count. Scheduling only: a tile's bits never depend on which CTA runs it.
int64_t persistent_ctas_cap() {
  const char *env = std::getenv("FOLD_FWD_CTAS");
  if (env == nullptr || env[0] == '\0') return 0;
  char *end = nullptr;
  const long n = std::strtol(env, &end, 10);
  if (*end != '\0' || n <= 0)
    fail(FOLD_ERR_INVALID_ARGUMENT,
         std::string("FOLD_FWD_CTAS=") + env + ": expected a positive integer");
  return n;
}

// The forward's Q / K / V tensor maps (boxes of bm query rows and bn keys) and their coordinate
// multipliers.
struct QkvMaps {
  ViewMap q, k, v;
  CoordMuls muls;
};
QkvMaps make_qkv_maps(const fold_attn_problem_t &p, const fold_tensor_t &q, const fold_tensor_t &k,
                      const fold_tensor_t &v, int bm, int bn) {
  QkvMaps m{make_view_map(p, q, p.n_heads, bm),
            make_view_map(p, k, p.n_kv_heads, bn),
            make_view_map(p, v, p.n_kv_heads, bn),
            {}};
  m.muls = CoordMuls{m.q.head_mul,  m.q.batch_mul, m.k.head_mul,
                     m.k.batch_mul, m.v.head_mul,  m.v.batch_mul};
  return m;
}

// v1.2's epilogue: FOLD_FWD_EPI "shf" (the default) or "stg" (Epi). Same bits either way.
int forward_epi() { return env_choice("FOLD_FWD_EPI", {"stg", "shf"}, kEpiShf); }

// v1.2 (persistent) with NC consumer warpgroups: one CTA per SM (at most one per tile) over
// v1.1's linear tile list, with v1.2's own tiles (V12Cfg). kScan: the instance whose producer
// warps also take the K / V bounds into kv_bounds (zeroed by the caller). kWindow: the instance
// that applies a sliding window. kSinks: the instance that applies attention sinks.
template <int D, class Tag, int NC, int EPI, bool kScan, bool kWindow, bool kSinks>
void launch_v12(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k, fold_tensor_t v,
                fold_tensor_t out, float *lse, uint32_t *kv_bounds, cudaStream_t stream) {
  using C = V12Cfg<D, NC>;
  constexpr int kSmem = C::kSmemBytes + 8;  // + the Q empty barrier
  static_assert(kSmem <= 227 * 1024, "shared memory (v1.2)");
  auto kernel = forward_v12_kernel<D, Tag, NC, EPI, kScan, kWindow, kSinks>;
  set_max_dynamic_smem(reinterpret_cast<const void *>(kernel), kSmem, "forward");
  const QkvMaps m = make_qkv_maps(p, q, k, v, C::kBm, C::kBn);
  const int64_t q_blocks = (static_cast<int64_t>(p.seqlen) + C::kBm - 1) / C::kBm;
  const int64_t all = q_blocks * p.n_heads * p.batch;
  if (all > 0x7fffffff)
    fail(FOLD_ERR_UNSUPPORTED, "seqlen * n_heads * batch too large for one grid");
  const TileOrder order = tile_order(p, q_blocks);
  const int64_t cap = persistent_ctas_cap();
  const int64_t grid = std::min<int64_t>(all, cap > 0 ? cap : sm_count());
  kernel<<<static_cast<unsigned>(grid), (NC + 1) * hw::kWarpgroupThreads, kSmem, stream>>>(
      p, m.q.map, m.k.map, m.v.map, m.muls, out, lse, static_cast<uint32_t>(all), order,
      forward_trim() ? 1 : 0, kv_bounds);
  check(cudaGetLastError(), "forward kernel launch");
}

// v1.2 with the default epilogue, with or without the K / V scan (kv_bounds null: without);
// returns true when it took the K / V bounds.
template <int D, class Tag, int NC, bool kWindow, bool kSinks>
bool launch_v12_shf(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k, fold_tensor_t v,
                    fold_tensor_t out, float *lse, uint32_t *kv_bounds, cudaStream_t stream) {
  if (kv_bounds == nullptr) {
    launch_v12<D, Tag, NC, kEpiShf, false, kWindow, kSinks>(p, q, k, v, out, lse, nullptr, stream);
    return false;
  }
  // Zeroed bits are the identity of the scan warps' atomicMax.
  check(cudaMemsetAsync(kv_bounds, 0, bounds_bytes(p), stream), "cudaMemsetAsync(kv_bounds)");
  launch_v12<D, Tag, NC, kEpiShf, true, kWindow, kSinks>(p, q, k, v, out, lse, kv_bounds, stream);
  return true;
}

// v1.2 with the epilogue forward_epi picks; returns true when it took the K / V bounds. Only
// the default epilogue has a scanning instance (the other is for A/B runs): a separate
// instance, so the forward of inference keeps its code as it was (the scan changes ptxas's
// schedule of the whole kernel, and spills a few tile values in the scan warps).
// Sliding windows likewise: a call whose window can mask something (window_may_mask: the window
// settings alone, never the batch's lengths) runs the kWindow instances, every other call the
// instances of before, whose code the window left untouched. The window instances exist for the
// default epilogue and consumer count only: the A/B forms (FOLD_FWD_EPI=stg, FOLD_FWD_VARIANT=
// v1.2-2wg) refuse a window that masks something in requests of up to seqlen tokens and run one
// that masks nothing as no window (exact then). Attention sinks likewise: a call with sinks runs
// the kSinks instances (with or without the window's), a call without them the instances of
// before; the A/B forms refuse sinks.
template <int D, class Tag, int NC>
bool launch_v12_epi(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k, fold_tensor_t v,
                    fold_tensor_t out, float *lse, uint32_t *kv_bounds, cudaStream_t stream) {
  constexpr bool kDefaultNc = !(D == 64 && NC == 2);  // D 64's default runs 3 consumers
  if ((forward_epi() == kEpiStg || !kDefaultNc) && !window_masks_nothing(p, p.seqlen))
    fail(FOLD_ERR_UNSUPPORTED, "window_before=" + std::to_string(p.window_before) +
                                   ", window_after=" + std::to_string(p.window_after) +
                                   ": FOLD_FWD_EPI=stg and FOLD_FWD_VARIANT=v1.2-2wg take no "
                                   "sliding window shorter than the longest request");
  if ((forward_epi() == kEpiStg || !kDefaultNc) && p.sinks != nullptr)
    fail(FOLD_ERR_UNSUPPORTED,
         "sinks: FOLD_FWD_EPI=stg and FOLD_FWD_VARIANT=v1.2-2wg take no "
         "attention sinks; the default forward does");
  if (forward_epi() == kEpiStg) {
    launch_v12<D, Tag, NC, kEpiStg, false, false, false>(p, q, k, v, out, lse, nullptr, stream);
    return false;
  }
  if constexpr (kDefaultNc) {
    const bool windowed = window_may_mask(p);
    if (p.sinks != nullptr)
      return windowed
                 ? launch_v12_shf<D, Tag, NC, true, true>(p, q, k, v, out, lse, kv_bounds, stream)
                 : launch_v12_shf<D, Tag, NC, false, true>(p, q, k, v, out, lse, kv_bounds, stream);
    if (windowed)
      return launch_v12_shf<D, Tag, NC, true, false>(p, q, k, v, out, lse, kv_bounds, stream);
  }
  return launch_v12_shf<D, Tag, NC, false, false>(p, q, k, v, out, lse, kv_bounds, stream);
}

// Returns true when the launched kernel took the K / V bounds into kv_bounds itself.
template <int D, class Tag>
bool launch(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k, fold_tensor_t v,
            fold_tensor_t out, float *lse, uint32_t *kv_bounds, cudaStream_t stream,
            Variant variant) {
  // Three consumer warpgroups only at D 64 (at D >= 96 a 64 x 128 O, S and P do not fit in 160
  // registers).
  if constexpr (D == 64)
    if (variant == Variant::kV12)
      return launch_v12_epi<D, Tag, 3>(p, q, k, v, out, lse, kv_bounds, stream);
  if (variant == Variant::kV12 || variant == Variant::kV12TwoConsumers)
    return launch_v12_epi<D, Tag, 2>(p, q, k, v, out, lse, kv_bounds, stream);
  // v1 and v1.1 (A/B runs only) mask causally only: a window that masks nothing for requests of
  // up to seqlen tokens leaves their result exact, any other is refused rather than ignored.
  if (!window_masks_nothing(p, p.seqlen))
    fail(FOLD_ERR_UNSUPPORTED, "window_before=" + std::to_string(p.window_before) +
                                   ", window_after=" + std::to_string(p.window_after) +
                                   ": FOLD_FWD_VARIANT v1 / v1.1 take no sliding window shorter "
                                   "than the longest request; the default forward (v1.2) does");
  if (p.sinks != nullptr)
    fail(FOLD_ERR_UNSUPPORTED,
         "sinks: FOLD_FWD_VARIANT v1 / v1.1 take no attention sinks; the "
         "default forward (v1.2) does");
  using C = Cfg<D>;
  using C11 = Cfg<D, V11Stages<D>::value>;
  static_assert(C11::kBm == C::kBm && C11::kBn == C::kBn, "same tiles");
  const bool v11 = variant != Variant::kV1;
  auto v11_kernel = variant == Variant::kV11NoPingPong ? forward_v11_kernel<D, Tag, false>
                                                       : forward_v11_kernel<D, Tag, true>;
  const int smem_bytes = v11 ? C11::kSmemBytes : C::kSmemBytes;
  const void *launched = v11 ? reinterpret_cast<const void *>(v11_kernel)
                             : reinterpret_cast<const void *>(forward_v1_kernel<D, Tag>);
  set_max_dynamic_smem(launched, smem_bytes, "forward");
  const QkvMaps m = make_qkv_maps(p, q, k, v, C::kBm, C::kBn);
  const int64_t q_blocks = (static_cast<int64_t>(p.seqlen) + C::kBm - 1) / C::kBm;
  const int64_t ctas = q_blocks * p.n_heads;
  if (ctas > 0x7fffffff) fail(FOLD_ERR_UNSUPPORTED, "seqlen * n_heads too large for one grid");
  const TileOrder order = tile_order(p, q_blocks);
  if (v11) {
    // One linear index over (query block, request, head): see forward_v11_kernel.
    const int64_t all = ctas * p.batch;
    if (all > 0x7fffffff)
      fail(FOLD_ERR_UNSUPPORTED, "seqlen * n_heads * batch too large for one grid");
    v11_kernel<<<static_cast<unsigned>(all), kThreads, smem_bytes, stream>>>(
        p, m.q.map, m.k.map, m.v.map, m.muls, out, lse, order);
  } else {
    const dim3 grid(static_cast<unsigned>(ctas), static_cast<unsigned>(p.batch), 1);
    forward_v1_kernel<D, Tag>
        <<<grid, kThreads, smem_bytes, stream>>>(p, m.q.map, m.k.map, m.v.map, m.muls, out, lse);
  }
  check(cudaGetLastError(), "forward kernel launch");
  return false;
}

template <class Tag>
bool launch_dim(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k, fold_tensor_t v,
                fold_tensor_t out, float *lse, uint32_t *kv_bounds, cudaStream_t stream,
                Variant variant) {
  switch (p.head_dim) {
    case 64:
      return launch<64, Tag>(p, q, k, v, out, lse, kv_bounds, stream, variant);
    case 96:
      return launch<96, Tag>(p, q, k, v, out, lse, kv_bounds, stream, variant);
    case 128:
      return launch<128, Tag>(p, q, k, v, out, lse, kv_bounds, stream, variant);
    case 256:
      return launch<256, Tag>(p, q, k, v, out, lse, kv_bounds, stream, variant);
    default:
      fail(FOLD_ERR_UNSUPPORTED, "head_dim=" + std::to_string(p.head_dim) +
                                     ": the CUDA training kernels take 64, 96, 128 or 256");
  }
}

// Where the forward's K / V bounds come from: FOLD_FWD_KV_BOUNDS "scan" (the default: the v1.2
// kernel's idle producer warps) or "pass" (launch_kv_bounds after the forward, as for the
// other kernels). Read at every call (A/B runs); the same bits either way.
bool forward_kv_scan() { return env_choice("FOLD_FWD_KV_BOUNDS", {"pass", "scan"}, 1) == 1; }

}  // namespace

void launch_forward(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k, fold_tensor_t v,
                    fold_tensor_t out, float *lse, float *kv_bounds, void *stream_ptr) {
  if (p.total_tokens == 0 || p.seqlen == 0) {
    if (kv_bounds != nullptr) launch_kv_bounds(p, k, v, kv_bounds, stream_ptr);  // zeros
    return;
  }
  // v0 for views TMA cannot describe (a token stride of 0): a property of the layout alone,
  // never of the batch's lengths, so a request's path is the same alone or in any batch.
  if (!tma_describable(p, q) || !tma_describable(p, k) || !tma_describable(p, v)) {
    launch_forward_v0(p, q, k, v, out, lse, stream_ptr);
    if (kv_bounds != nullptr) launch_kv_bounds(p, k, v, kv_bounds, stream_ptr);
    return;
  }
  if (p.batch > 65535) fail(FOLD_ERR_UNSUPPORTED, "batch must be <= 65535 on CUDA");
  // TMA coordinates are signed 32-bit (no tensor this large fits in device memory anyway).
  if (p.total_tokens > 0x7fffffff || p.seqlen > 0x7fffffff - 256)
    fail(FOLD_ERR_UNSUPPORTED, "total_tokens must be < 2^31 on CUDA");
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  const Variant variant = forward_variant();
  // The scanning kernel zeroes and fills kv_bounds where it runs; elsewhere the pass does.
  uint32_t *scan =
      kv_bounds != nullptr && forward_kv_scan() ? reinterpret_cast<uint32_t *>(kv_bounds) : nullptr;
  const bool scanned = p.dtype == FOLD_DTYPE_BF16
                           ? launch_dim<Bf16>(p, q, k, v, out, lse, scan, stream, variant)
                           : launch_dim<F16>(p, q, k, v, out, lse, scan, stream, variant);
  if (kv_bounds != nullptr && !scanned) launch_kv_bounds(p, k, v, kv_bounds, stream_ptr);
}

}  // namespace fold::cuda
