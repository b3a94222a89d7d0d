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
// Included by forward.cu inside its anonymous namespace, after forward_softmax.cuh.

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
