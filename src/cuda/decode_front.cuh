// The step's front: each row's q planes (Hadamard-rotated, two int8 planes and a scale) and its
// declared reference Z from the sampled keys, and the step's counters reset (no memset precedes
// it). Included by decode.cu inside its anonymous namespace, after decode_step_state.cuh.

// The lane's E elements of q row h (as loaded; quantise_q_row_warp scales them).
template <int E>
__device__ __forceinline__ void load_q_row(const DecodeCache &c, const fold_tensor_t &q, int b,
                                           int h, float (&x)[E]) {
  const int64_t base = b * q.batch_stride + h * q.head_stride + E * (threadIdx.x & 31);
#pragma unroll
  for (int e = 0; e < E; ++e) x[e] = load16(c.dtype, q.data, base + e);
}

// Prefetches the lane's elements of q row h into L1 (no register held until load_q_row).
template <int E>
__device__ __forceinline__ void prefetch_q_row(const fold_tensor_t &q, int b, int h) {
  const int64_t base = b * q.batch_stride + h * q.head_stride + E * (threadIdx.x & 31);
  asm volatile("prefetch.global.L1 [%0];" ::"l"(static_cast<const uint16_t *>(q.data) + base));
}

// Quantises q row h in one warp: lane owns elements [E * lane, E * lane + E) (D = 32 E).
// The butterfly stages are hadamard_unnormalised's (h = 1, 2, ...), the first log2 E in
// registers, the rest across lanes: element j (bit h clear) gets x[j] + x[j + h], element
// j + h gets x[j] - x[j + h], the same two roundings as the reference.
template <int E>
__device__ __forceinline__ void quantise_q_row_warp(const DecodeCache &c, const float (&x)[E],
                                                    float cmul, int b, int h, int H, const Ws &ws,
                                                    int8_t *sa, int8_t *sb, float *s_sq) {
  constexpr int D = 32 * E;
  const int lane = threadIdx.x & 31;
  float y[E];
#pragma unroll
  for (int e = 0; e < E; ++e) y[e] = mul_rn(x[e], cmul);
  constexpr int kLogE = E == 2 ? 1 : (E == 4 ? 2 : 3);
#pragma unroll
  for (int ls = 0; ls < kLogE; ++ls) {
    const int s = 1 << ls;
#pragma unroll
    for (int e = 0; e < E; ++e)
      if ((e & s) == 0) {
        const float a = y[e], r = y[e + s];
        y[e] = add_rn(a, r);
        y[e + s] = sub_rn(a, r);
      }
  }
#pragma unroll
  for (int ls = 1; ls < 32; ls *= 2) {
    const bool upper = (lane & ls) != 0;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const float other = __shfl_xor_sync(0xffffffffu, y[e], ls);
      y[e] = upper ? sub_rn(other, y[e]) : add_rn(y[e], other);
    }
  }
  unsigned int m = 0u;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const unsigned int u = __float_as_uint(y[e]) & 0x7fffffffu;
    m = u > m ? u : m;
  }
  m = __reduce_max_sync(0xffffffffu, m);
  const float scale = bf16_bits_to_float(plane_scale_bits(__uint_as_float(m)));
  const int64_t row = static_cast<int64_t>(b) * H + h;
  // The planes' L1 norms (exact integers) give the row's coarse error per unit of key scale
  // (planes.h, coarse_error_from_l1).
  int32_t l1a = 0, l1b = 0;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    int8_t pa = 0, pb = 0;
    if (scale != 0.0f) split_element(div_rn(y[e], scale), pa, pb);
    const int d = E * lane + e;
    ws.qa[row * D + d] = pa;
    ws.qb[row * D + d] = pb;
    sa[d] = pa;
    sb[d] = pb;
    l1a += pa < 0 ? -int32_t{pa} : int32_t{pa};
    l1b += pb < 0 ? -int32_t{pb} : int32_t{pb};
  }
  l1a = static_cast<int32_t>(__reduce_add_sync(0xffffffffu, static_cast<unsigned int>(l1a)));
  l1b = static_cast<int32_t>(__reduce_add_sync(0xffffffffu, static_cast<unsigned int>(l1b)));
  if (lane == 0) {
    ws.sq[row] = scale;
    ws.e[row] = coarse_error_from_l1(l1a, l1b, scale, log2_pow2(D));
    *s_sq = scale;
  }
}

// The group's largest coarse error per unit of key scale (the rule of planes.h's
// coarse_untrusted is per key against the group's rows together, as the CPU reference). Called
// by whole warps: the lanes load the rows in parallel (a loop of G loads, each waited for before
// the next, sat at the start of every split block), then one reduction. For finite q rows E is
// never negative nor NaN (planes.h), so its bits order as its values, +inf included: the CPU
// reference's max. A non-finite q row (which the CPU reference refuses; a graphed step may still
// carry one) gives E = -0 or NaN, whose bits rank above +inf: such values are skipped, as the float
// comparison skipped them, so that one bad row does not switch the rule off for its group.
__device__ __forceinline__ float group_e_max(const Ws &ws, int64_t row0, int G) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  unsigned int m = 0u;
  for (int g = lane; g < G; g += 32) {
    const unsigned int e = __float_as_uint(ws.e[row0 + g]);
    m = e > m && e <= 0x7f800000u ? e : m;
  }
  return __uint_as_float(__reduce_max_sync(0xffffffffu, m));
}

// c += A B on the integer tensor cores: mma.m16n8k32 s8 x s8 -> s32 (exact). Fragments
// (PTX ISA, "Matrix Fragments for mma.m16n8k32"), lane = 4 g + t: A a0 = (row g, k 4t..4t+3),
// a1 = (row g + 8, same k), a2 = (row g, k 16 + 4t..), a3 = (row g + 8, k 16 + 4t..);
// B b0 = (col g, k 4t..4t+3), b1 = (col g, k 16 + 4t..); C c0, c1 = (row g, cols 2t, 2t + 1),
// c2, c3 = (row g + 8, same cols). An integer dot does not depend on the order of k, so each
// lane may feed any 8 bytes of its key as long as its A registers hold the q bytes at the
// same positions (the split kernel's qfrag).
__device__ __forceinline__ void mma_s8(int32_t c[4], const uint4 &a, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
}

// The sample's shape (reference_z.h sample_shape) for a sample of `len` keys, computed by every
// warp from the heavy list in its lanes 0 .. kHeavyKeys - 1 (`h`: the entry, any value where
// empty): the masks of the middle entries and of their first occurrences (heavy_masks' rule) by a
// vote and a match over the lanes, so that no thread plans alone for the others and no barrier or
// shared copy precedes the slots (one thread's plan and the 8 x 8 loops of the exact middle slots
// were 0.4-1.5 µs of the B1 front's chain, notes/decode.md section 63). hl: the list in every
// lane, for the slots' is_heavy tests.
__device__ __forceinline__ ZSampleShape front_shape(int32_t len, int32_t h,
                                                    int32_t (&hl)[kHeavyKeys]) {
  const unsigned lane = threadIdx.x & 31u;
  const bool mid = lane < kHeavyKeys && heavy_is_middle(h, sample_newest_lo(len));
  // (A lane that holds no middle entry matches no other: its key -2 - lane is unique, and a
  // middle entry is >= 1.)
  const unsigned peers = __match_any_sync(0xffffffffu, mid ? h : -2 - static_cast<int32_t>(lane));
  const unsigned valid = __ballot_sync(0xffffffffu, mid);
  const unsigned distinct = __ballot_sync(0xffffffffu, mid && (peers & ((1u << lane) - 1u)) == 0u);
#pragma unroll
  for (int e = 0; e < kHeavyKeys; ++e) hl[e] = __shfl_sync(0xffffffffu, h, e);
  return sample_shape(len, valid, distinct);
}

// Writes the sample's slot keys (plus F, a window's first key) into s_key, one slot per thread
// (tid < the block's threads; the heavy middle keys by warp 0's lanes, lane e holding entry h).
__device__ __forceinline__ void front_place_slots(const ZSampleShape &s,
                                                  const int32_t (&hl)[kHeavyKeys], int32_t h,
                                                  int32_t F, int tid, int32_t *s_key) {
  if (tid == 0) s_key[0] = F;
  if (tid < s.n_newest) s_key[1 + tid] = F + s.newest_lo + tid;
  if (tid < kHeavyKeys && ((s.valid >> tid) & 1u) != 0u) s_key[sample_heavy_slot(s, tid)] = F + h;
  if (s.m > kZStrata) {
    if (tid < kZStrata) s_key[s.first_middle + tid] = F + sample_stratum_key(s, hl, tid);
  } else if (tid < s.m) {
    const int slot = sample_exact_middle_slot(s, hl, 1 + tid);
    if (slot >= 0) s_key[slot] = F + 1 + tid;
  }
}

constexpr int kFrontRows = kThreads / 32;  // rows per block step: one warp per row

// grid (Hkv, B, row blocks), FT threads (256; 128 in the HALF form); D = 32 E. Every step is
// parallel: the sample's slots are placed by one thread each (front_place_slots), q rows are
// quantised one warp each, the sample's fine logits on the int8 tensor cores (each warp
// kZSlots / (FT / 32) slots, 32 or 64, x the step's rows; on dp4a,
// one thread per slot, they were most of the front's time at large batch), and each row's Z one
// warp (max, 2^(s - M), the stratum ranks among the unweighted values, the halving tree: three
// levels in registers, five by shuffles).
// Four blocks per SM (D <= 128; 64 registers, no spills): the front is a chain of dependent loads
// (ncu, notes/decode.md section 16), so resident blocks are what hide it. D 256 spills under it.
// The front also starts the step's bookkeeping (no memset precedes it): with `appended`, it
// takes each request's length from the append (Ws::newlen) and block (0, b, 0) publishes it into
// the cache (the later kernels read it there); the first block of each group resets the group's
// counters, block (0, 0, 0) the step's (the flagged-group count and `stats`; pass 1 adds the
// rejected appends from Ws::rej). Every writer of those counters runs after the front.
// (A group without keys returns before its read counters and pass-1 counter are reset: nothing
// reads them.)
// SMALL: a small batch (fewer groups than SMs: one row per block, or 8 where that grid would not
// fit one block per SM; the front's chain is the step's critical path): the sample's key rows are
// prefetched into L2 and the first q row into L1, holding no registers. Else (eight rows per block,
// several blocks per SM hiding each other's chains) the first row step's q values are loaded into
// registers at the start, as before this session. Two instances, so that each gets its own register
// allocation. UNROLL (where the front's grid fits in one block per SM; FOLD_DECODE_FRONT_UNROLL=0
// turns it off): SMALL with every sample tile's key loads issued before the first tile's MMAs,
// registers unbounded (up to 168 at D 128: one block per SM). UNROLL without SMALL (U2, a grid of
// at most two blocks per SM): the same loads at up to 128 registers. FT = 128 (HALF, a large
// batch at G <= 4): four warps, a group of up to four rows per block, eight blocks per SM.
// WIN (a step with a sliding window, window = its window_before > 0): the sample is the window's
// (reference_z.h plan_window_sample): the plain sample's shape for L - F keys, the heavy entries
// shifted by F (those at or before F dropped), every slot's key shifted by F. F = 0 gives the
// plain sample. (Without WIN `window` is not read.)
template <int E, bool SMALL, bool UNROLL = false, int FT = kThreads, bool WIN = false>
__global__ void __launch_bounds__(FT, UNROLL ? (SMALL ? 1 : 2) : (E == 8 ? 2 : (FT == 128 ? 8 : 4)))
    decode_front_kernel(const DecodeCache c, const fold_tensor_t q, const float cmul, const int H,
                        const Ws ws, int64_t *stats, const int rows_per_cta, const int appended,
                        const int early, const int window) {
  pdl_wait();
  // OVERLAP (the dense ring or split2 follows): its blocks may start now, beside this grid; they
  // read nothing this kernel writes before their own wait (decode_split_ring_kernel,
  // split2_item).
  if (early != 0) pdl_trigger();
  constexpr int D = 32 * E;
  constexpr int FR = FT / 32;  // rows per block step: one warp per row
  static_assert(FT == kThreads || (FT == kThreads / 2 && !SMALL && !UNROLL),
                "the 128-thread form is the large batch's, with the tile loop");
  static_assert(
      FT >= kZStrata && FT >= kHeavyKeys && FT >= FOLD_DECODE_CUDA_STATS && FT >= kZNewest,
      "one thread per stratum, heavy key, statistic and newest key");
  __shared__ __align__(16) int8_t qa8[FR][D];
  __shared__ __align__(16) int8_t qb8[FR][D];
  __shared__ float x8[FR][kZSlots];
  __shared__ float s_sq[FR];
  __shared__ int32_t s_key[kZSlots];
  __shared__ int64_t s_kr[kZSlots];
  __shared__ float s_sk[kZSlots];
  const int hk = blockIdx.x, b = blockIdx.y;
  const int G = H / c.n_kv_heads, log2d = log2_pow2(D);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // This block's rows [g_begin, g_end) of the group (blockIdx.z: several blocks per group when
  // the batch is small, so that more SMs share the front; every row's values are the same
  // whichever block computes them). Block z = 0 does the group's once-only work.
  const int g_begin = blockIdx.z * rows_per_cta, g_end = min(G, g_begin + rows_per_cta);
  const bool first_block = blockIdx.z == 0;
  // The loads that depend on nothing are issued together (the front is a chain of dependent
  // loads): the length, the heavy-key list and the first row step's q values.
  const int32_t L = appended ? ws.newlen[b] : c.lengths[b];
  int32_t heavy = -1;  // (every warp's lanes 0 .. kHeavyKeys - 1: front_shape)
  if (lane < kHeavyKeys)
    heavy = c.heavy_keys[(static_cast<int64_t>(b) * c.n_kv_heads + hk) * kHeavyKeys + lane];
  float q0[SMALL ? 1 : E];
  if (warp < min(FR, g_end - g_begin)) {
    if constexpr (SMALL)
      prefetch_q_row<E>(q, b, hk * G + g_begin + warp);
    else
      load_q_row<E>(c, q, b, hk * G + g_begin + warp, q0);
  }
  // The guard state of the group, cleared for the combine (which ORs into it from several
  // blocks).
  for (int g = g_begin + tid; g < g_end; g += blockDim.x)
    ws.bad[static_cast<int64_t>(b) * H + hk * G + g] = 0;
  if (tid == 0 && first_block) ws.flag[static_cast<int64_t>(b) * c.n_kv_heads + hk] = 0;
  if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) {  // the step's counters
    if (tid == 0) {
      *ws.nflag = 0;
      *ws.ring_next = 0;
    }
    if (stats != nullptr && tid < FOLD_DECODE_CUDA_STATS) stats[tid] = 0;
  }
  // (Returns before the group's counters are reset, at the end: they are read only for groups
  // with keys. An append leaves L >= 1, so this request's length did not change.)
  if (L <= 0) return;
  const int32_t F = WIN ? window_first(L, window) : 0;  // the window's first key
  // The sample's shape, by every warp (front_shape; WIN: the window's keys, F on).
  const int32_t heavy_w = WIN ? (heavy > F ? heavy - F : -1) : heavy;
  int32_t hl[kHeavyKeys];
  const ZSampleShape sh = front_shape(L - F, heavy_w, hl);
  // The sample's bytes join the group's read counters (add_step_stats adds them to `stats`).
  if (tid == 0 && first_block)
    ws.gcnt[(static_cast<int64_t>(b) * c.n_kv_heads + hk) * 5 + 4] =
        static_cast<unsigned long long>(sh.n) * (2 * D + 2);
  const int n = sh.n;
  const bool strata = sh.m > kZStrata;
  const int first_stratum = strata ? sh.first_middle : n;
  // Place the slots (each slot written by exactly one thread; WIN: the window's keys, F on).
  front_place_slots(sh, hl, heavy_w, F, tid, s_key);
  __syncthreads();
  // Slot tid's key row and scale, for the warps' tiles below. SMALL: the row's two planes are
  // prefetched into L2 at once (no registers held), so that their latency overlaps the q
  // quantisation instead of following it (B1 D 64: front 9.9 -> 8.9 us; with 8 rows per block
  // the extra instructions cost more than they hide: B32 15.2 -> 16.0 us).
  // SMALL: warps 1-7 take the slots (slot tid - 32: the sample has at most 200) and warp 0 none,
  // and no barrier follows: warp 0 quantises the first q row while the others look up the
  // sample's rows and scales (two dependent loads), and the first row step's barrier, after the
  // quantisation, orders both before the tiles read s_kr and s_sk. (Before, the quantisation
  // waited behind both loads at a barrier of its own.) Scheduling only: the same values.
  constexpr bool OVERLAP_Q = SMALL && FT == kThreads;
  static_assert(!OVERLAP_Q || 1 + kZNewest + kHeavyKeys + kZStrata <= FT - 32,
                "warps 1.. hold every slot of the sample");
  if constexpr (FT == kThreads) {
    const int slot = OVERLAP_Q ? (tid + FT - 32) % FT : tid;
    if (slot < n) {
      const int64_t kr = key_row(c, b, hk, s_key[slot]);
      s_kr[slot] = kr;
      if constexpr (SMALL)
        for (int o = 0; o < D; o += 128) {
          asm volatile("prefetch.global.L2 [%0];" ::"l"(c.k_a + kr * D + o));
          asm volatile("prefetch.global.L2 [%0];" ::"l"(c.k_b + kr * D + o));
        }
      s_sk[slot] = bf16_bits_to_float(c.k_scale[kr]);
    }
  } else {
    // HALF: two slots per thread, their page-table loads issued together, then their scales.
    const int i1 = tid + FT;
    const int64_t kr0 = tid < n ? key_row(c, b, hk, s_key[tid]) : 0;
    const int64_t kr1 = i1 < n ? key_row(c, b, hk, s_key[i1]) : 0;
    const uint16_t sc0 = tid < n ? c.k_scale[kr0] : 0, sc1 = i1 < n ? c.k_scale[kr1] : 0;
    if (tid < n) {
      s_kr[tid] = kr0;
      s_sk[tid] = bf16_bits_to_float(sc0);
    }
    if (i1 < n) {
      s_kr[i1] = kr1;
      s_sk[i1] = bf16_bits_to_float(sc1);
    }
  }
  if constexpr (!OVERLAP_Q) __syncthreads();
  // The sample's fine logits on the int8 tensor cores (mma.m16n8k32, as the split kernels): warp
  // w takes slots 8 kTiles w .. 8 kTiles (w + 1) - 1 as kTiles tiles of 8 keys (4 tiles at 256
  // threads, 8 at 128; B: lane (g, t) feeds key 8 tile + g's
  // bytes 16 (t + 4 i) .. + 15, NP pieces per plane), A = the step's q planes (row g plane A, row
  // g + 8 plane B, the same byte positions). The integer dots are exact, so the logits are the
  // reference's bits.
  constexpr int NP = D / 64;
  constexpr int kTiles = kZSlots / (8 * FR);  // tiles of 8 slots per warp
  const int mg = lane >> 2, mt = lane & 3;
  for (int g0 = g_begin; g0 < g_end; g0 += FR) {
    const int rows = min(FR, g_end - g0);
    if (warp < rows) {
      float x[E];
      if (!SMALL && g0 == g_begin) {
#pragma unroll
        for (int e = 0; e < E; ++e) x[e] = q0[SMALL ? 0 : e];
      } else {
        load_q_row<E>(c, q, b, hk * G + g0 + warp, x);
      }
      quantise_q_row_warp<E>(c, x, cmul, b, hk * G + g0 + warp, H, ws, qa8[warp], qb8[warp],
                             &s_sq[warp]);
    }
    __syncthreads();
    uint4 qf[2 * NP];  // A fragments: zero for rows >= rows (their smem holds no step's q)
#pragma unroll
    for (int sl = 0; sl < 2 * NP; ++sl) {
      const int o = 16 * (mt + 4 * (sl >> 1)) + 8 * (sl & 1);
      qf[sl] = make_uint4(0u, 0u, 0u, 0u);
      if (mg < rows) {
        const uint32_t *pa = reinterpret_cast<const uint32_t *>(qa8[mg] + o);
        const uint32_t *pb = reinterpret_cast<const uint32_t *>(qb8[mg] + o);
        qf[sl] = make_uint4(pa[0], pb[0], pa[1], pb[1]);
      }
    }
    // The lane's key bytes of tile `tile` (zeros past the sample), and that tile's fine logits.
    auto load_tile = [&](int tile, int4(&la)[NP], int4(&lb)[NP]) {
      const int slot = 8 * (kTiles * warp + tile) + mg;  // this lane's key (B column mg)
      const int64_t kr = slot < n ? s_kr[slot] : -1;
#pragma unroll
      for (int i = 0; i < NP; ++i) {
        la[i] = kr >= 0 ? reinterpret_cast<const int4 *>(c.k_a + kr * D)[mt + 4 * i]
                        : make_int4(0, 0, 0, 0);
        lb[i] = kr >= 0 ? reinterpret_cast<const int4 *>(c.k_b + kr * D)[mt + 4 * i]
                        : make_int4(0, 0, 0, 0);
      }
    };
    auto tile_logits = [&](int tile, const int4(&la)[NP], const int4(&lb)[NP]) {
      const int base = 8 * (kTiles * warp + tile);
      int32_t ca[4] = {0, 0, 0, 0}, cb[4] = {0, 0, 0, 0};
#pragma unroll
      for (int i = 0; i < NP; ++i) {
        mma_s8(ca, qf[2 * i], la[i].x, la[i].y);
        mma_s8(ca, qf[2 * i + 1], la[i].z, la[i].w);
        mma_s8(cb, qf[2 * i], lb[i].x, lb[i].y);
        mma_s8(cb, qf[2 * i + 1], lb[i].z, lb[i].w);
      }
      // C: row mg (plane A: c0, c1; plane B: c2, c3) x slots base + 2 mt + j.
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int slot = base + 2 * mt + j;
        if (mg < rows && slot < n)
          x8[mg][slot] = fine_logit(ca[j], ca[2 + j], cb[j], cb[2 + j],
                                    logit_multiplier(s_sq[mg], s_sk[slot], 16 + log2d));
      }
    };
    if constexpr (UNROLL && NP <= 2) {
      // A small batch (one row per block, few blocks: the front's chain is the step's critical
      // path): every tile's key loads first, one memory latency per warp instead of one per tile
      // (up to 64 registers of loads).
      int4 la[kTiles][NP], lb[kTiles][NP];
#pragma unroll
      for (int tile = 0; tile < kTiles; ++tile) load_tile(tile, la[tile], lb[tile]);
#pragma unroll
      for (int tile = 0; tile < kTiles; ++tile)
        if (8 * (kTiles * warp + tile) < n) tile_logits(tile, la[tile], lb[tile]);  // uniform
    } else {
      // Not unrolled: unrolled, ptxas (64 registers) interleaved each tile's four key loads with
      // its mma's, four memory latencies per tile instead of one (ncu, B128: front 37.5 -> 42.9
      // us after this session's bookkeeping moved in); as a loop the loads issue together.
#pragma unroll 1
      for (int tile = 0; tile < kTiles; ++tile) {
        if (8 * (kTiles * warp + tile) >= n) break;  // warp-uniform
        int4 la[NP], lb[NP];
        load_tile(tile, la, lb);
        tile_logits(tile, la, lb);
      }
    }
    __syncthreads();
    if (warp < rows) {
      float *x = x8[warp];
      float m = x[0];
#pragma unroll
      for (int k = 0; k < kZSlots / 32; ++k) {
        const int i = lane + 32 * k;
        if (i < n) m = x[i] > m ? x[i] : m;
      }
#pragma unroll
      for (int o = 16; o >= 1; o /= 2) {
        const float other = __shfl_xor_sync(0xffffffffu, m, o);
        m = other > m ? other : m;
      }
      float v[kZSlots / 32];
#pragma unroll
      for (int k = 0; k < kZSlots / 32; ++k) {
        const int i = lane + 32 * k;
        v[k] = i < n ? exp2_fp(sub_rn(x[i], m)) : 0.0f;
      }
      if (first_stratum < n) {
        const float w = div_rn(static_cast<float>(sh.m - kZTopUnweighted),
                               static_cast<float>(kZStrata - kZTopUnweighted));
        // A stratum slot keeps weight 1 iff its rank (values above it, or equal at a lower
        // slot) is < kZTopUnweighted. The values are exp2_fp's, never NaN (it maps NaN to
        // +inf) nor negative, so that order is total (value descending, then slot ascending)
        // and bit patterns order like the values: the kZTopUnweighted first slots are picked
        // by as many rounds of a warp arg-max (~150 instructions; counting every rank took
        // ~10k per warp, the front's largest cost).
        unsigned int top = 0u;  // bit k: slot lane + 32 k is a top stratum sample
        for (int round = 0; round < kZTopUnweighted; ++round) {
          // This lane's best untaken stratum slot as (value bits, kZSlots - slot) > 0.
          unsigned int bh = 0u, bl = 0u;
#pragma unroll
          for (int k = 0; k < kZSlots / 32; ++k) {
            const int i = lane + 32 * k;
            const unsigned int h = __float_as_uint(v[k]), l = kZSlots - i;
            const bool cand = i >= first_stratum && i < n && ((top >> k) & 1u) == 0u;
            if (cand && (h > bh || (h == bh && l > bl))) {
              bh = h;
              bl = l;
            }
          }
          const unsigned int wh = __reduce_max_sync(0xffffffffu, bh);
          const unsigned int wl = __reduce_max_sync(0xffffffffu, bh == wh ? bl : 0u);
          const int slot = kZSlots - static_cast<int>(wl);  // >= 128 strata: always found
          if ((slot & 31) == lane) top |= 1u << (slot >> 5);
        }
#pragma unroll
        for (int k = 0; k < kZSlots / 32; ++k) {
          const int i = lane + 32 * k;
          if (i >= first_stratum && i < n && ((top >> k) & 1u) == 0u) v[k] = mul_rn(v[k], w);
        }
      }
      // Halving tree: h = 128, 64, 32 inside the lane (slot i = lane + 32 k), then shuffles.
#pragma unroll
      for (int k = 0; k < 4; ++k) v[k] = add_rn(v[k], v[k + 4]);
#pragma unroll
      for (int k = 0; k < 2; ++k) v[k] = add_rn(v[k], v[k + 2]);
      v[0] = add_rn(v[0], v[1]);
#pragma unroll
      for (int h = 16; h >= 1; h /= 2) {
        const float other = __shfl_down_sync(0xffffffffu, v[0], h);
        if (lane < h) v[0] = add_rn(v[0], other);
      }
      if (lane == 0)
        ws.z[static_cast<int64_t>(b) * H + hk * G + g0 + warp] = add_rn(m, log2_fp(v[0]));
    }
    __syncthreads();
  }
  // The group's counters and the request's length, at the end: nothing in the front reads them,
  // and at the start their stores held registers that the q values then spilled for. (Indices
  // from blockIdx and threadIdx again, L from the workspace: nothing kept live for this.)
  if (blockIdx.z == 0) {
    const int64_t grp = static_cast<int64_t>(blockIdx.y) * c.n_kv_heads + blockIdx.x;
    const unsigned t = threadIdx.x;
    if (t < 4) ws.gcnt[grp * 5 + t] = 0ull;  // [4]: the sample's bytes (written above)
    if (t == 4) ws.p1done[grp] = 0;
    if (t == 5 && blockIdx.x == 0 && appended) c.lengths[blockIdx.y] = ws.newlen[blockIdx.y];
  }
  pdl_trigger();
}
