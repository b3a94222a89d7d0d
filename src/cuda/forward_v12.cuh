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
// Included by forward.cu inside its anonymous namespace, after forward_v11.cuh.
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
