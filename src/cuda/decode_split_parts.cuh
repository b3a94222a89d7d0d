// The pieces the split kernels share (the plain split, split2, the dense and screened rings):
// layout constants and shared-memory sizes, the value product on the tensor cores
// (mma.m16n8k16, e4m3 planes widened, ldmatrix) and by fma, cp.async, the integer key dots, a
// key's weight, the row sums' fixed trees and a split's page starts.
// Included by decode.cu inside its anonymous namespace, after decode_front.cuh.

constexpr int kPagesPerSplit = kSplitKeys / 64;  // page size >= 64
// Row stride (floats) of the chunk's weight buffers w and pe: rows padded by 4 floats so that
// the row-sum threads (one per row, float4 loads) hit distinct banks.
constexpr int kWS = kChunk + 4;
constexpr int kFlagPresent = 8, kFlagLive = 1, kFlagRefine = 2, kFlagVRefine = 4;

// The value product's columns per lane (C) and column halves (H): D = 32 C H.
__host__ __device__ constexpr int pv_cols(int D) { return D == 256 ? 4 : 2; }
__host__ __device__ constexpr int pv_halves(int D) { return D / (32 * pv_cols(D)); }

// The value product on the tensor cores (split kernels with bf16 / fp16 V): stage rows padded by
// 16 bytes so that ldmatrix's 8 rows of 16 bytes fall in distinct banks.
__host__ __device__ constexpr int pv_vrow(int D, bool mma) { return mma ? 2 * D + 16 : 2 * D; }
// split2's value stage rows. D >= 128: 256-byte rows (no padding), piece c (16 bytes) of row k at
// c ^ (k % 8), so that the value product's ldmatrix (8 rows at one piece) stays free of bank
// conflicts and the gathers' copies by rows write whole aligned 128-byte lines (the 272-byte
// padded rows made each 256-byte row straddle three: ~3 wavefronts per one needed, ncu, session
// 34). D 64: pv_vrow's padded rows.
__host__ __device__ constexpr bool split2_vswz(int D) { return D >= 128; }
__host__ __device__ constexpr int split2_vrow(int D) {
  return split2_vswz(D) ? 2 * D : pv_vrow(D, true);
}
// Warps per m tile (16 columns of V), each summing its own part of a chunk's keys into its own
// N slice: D 64 has 4 m tiles for 8 warps.
__host__ __device__ constexpr int pv_kparts(int D) { return D >= 128 ? 1 : 128 / D; }

__host__ __device__ inline size_t split_smem_bytes(int G, int D, bool mma) {
  const size_t nrb = static_cast<size_t>(G + 7) / 8;
  const size_t n_slices = mma ? static_cast<size_t>(pv_kparts(D)) * 8 * nrb * D
                              : static_cast<size_t>(fold::decode::pv_slices(G)) * G * D;
  return static_cast<size_t>(2) * 64 * pv_vrow(D, mma)  // value stages
         + n_slices * 4                                 // N's slices
         + (mma ? 1u : 2u) * G * kWS * 4                // w (coarse logits, weights); v8: pe
         + static_cast<size_t>(kChunk) * 8 * nrb * 4    // weights, transposed
         + nrb * 8 * 2 * D                              // q planes (MMA A)
         + (8u + kPagesPerSplit) * G * 4                // per-row values, page cut masses
         + (mma ? 3u * 8 * 8 * nrb * 4 : 0u);           // warp sums (MMA)
}

// The producer's wait for a free stage, with a pause between probes: the producer is ahead by
// construction, and its spinning took ~10% of the issue slots the consumers need (ncu).
__device__ __forceinline__ void producer_wait(uint64_t *bar, uint32_t parity) {
  while (!hopper::mbar_try_wait(bar, parity)) __nanosleep(128);
}

// c += A B, mma.m16n8k16 with 16-bit operands (bf16 or fp16) and fp32 accumulators. Fragments
// (PTX ISA, "Matrix Fragments for mma.m16n8k16"), lane = 4 g + t: A a0 = (row g, k 2t, 2t + 1),
// a1 = (row g + 8, same k), a2 = (row g, k 2t + 8, 2t + 9), a3 = (row g + 8, k 2t + 8, ..);
// B b0 = (k 2t, 2t + 1; col g), b1 = (k 2t + 8, 2t + 9; col g); C c0, c1 = (row g, cols 2t,
// 2t + 1), c2, c3 = (row g + 8, same cols).
template <bool F16>
__device__ __forceinline__ void mma_16(float c[4], const uint32_t (&a)[4], uint32_t b0,
                                       uint32_t b1) {
  if (F16)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two E4M3 bytes (low: the lower key), divided by 8 if EIGHTH, as a bf16 pair, low half first:
// E4M3 -> f16 (exact: every E4M3 value is an f16 normal or zero), the division on the f16 pair
// (exact: E4M3's smallest magnitude 2^-9 / 8 is an f16 normal), -> f32 -> bf16 (exact: 4
// significant bits within bf16's range).
template <bool EIGHTH>
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t two) {
  const __half2_raw raw =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xffffu), __NV_E4M3);
  __half2 h(raw);
  if (EIGHTH) h = __hmul2(h, __half2(__half_raw{0x3000}, __half_raw{0x3000}));  // 0x3000: 1/8
  const float2 f = __half22float2(h);
  const __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);
  return *reinterpret_cast<const uint32_t *>(&b);
}

// The v8 ring's A fragment of one plane (decode_split_ring_kernel, pv_mma_chunk_acc_at's V8): words
// w0 (keys 0-7) and w1 (keys 8-15) of ldmatrix.trans over byte rows, each holding bytes (key 2t,
// column 2g), (2t, 2g + 1), (2t + 1, 2g), (2t + 1, 2g + 1): per word, the pair of column 2g
// (fragment row g) and the pair of column 2g + 1 (row g + 8).
template <bool EIGHTH>
__device__ __forceinline__ void e4m3_fragment(uint32_t w0, uint32_t w1, uint32_t (&a)[4]) {
  const uint32_t x0 = __byte_perm(w0, 0u, 0x3120u), x1 = __byte_perm(w1, 0u, 0x3120u);
  a[0] = e4m3x2_to_bf16x2<EIGHTH>(x0);
  a[1] = e4m3x2_to_bf16x2<EIGHTH>(x0 >> 16);
  a[2] = e4m3x2_to_bf16x2<EIGHTH>(x1);
  a[3] = e4m3x2_to_bf16x2<EIGHTH>(x1 >> 16);
}

__device__ __forceinline__ void ldsm_x2(uint32_t (&r)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// A 16-key step of a v8 stage: one ldmatrix.x4.trans of both planes' bytes (matrices 0 / 1:
// plane A, keys 0-7 / 8-15; 2 / 3: plane B), as the A fragments of plane A and of plane B / 8.
__device__ __forceinline__ void ldsm_e4m3_planes(uint32_t addr, uint32_t (&a)[4],
                                                 uint32_t (&a2)[4]) {
  uint32_t wd[4];
  ldsm_x4_trans(wd, addr);
  e4m3_fragment<false>(wd[0], wd[1], a);  // plane A
  e4m3_fragment<true>(wd[2], wd[3], a2);  // plane B / 8
}

// Two operand weights as one word (low half = the first key), in the cache's value format.
template <bool F16>
__device__ __forceinline__ uint32_t pack_operands(float w0, float w1) {
  const uint32_t lo =
      F16 ? __half_as_ushort(__float2half_rn(w0)) : __bfloat16_as_ushort(__float2bfloat16_rn(w0));
  const uint32_t hi =
      F16 ? __half_as_ushort(__float2half_rn(w1)) : __bfloat16_as_ushort(__float2bfloat16_rn(w1));
  return lo | (hi << 16);
}

constexpr int kWRow = kChunk + 8;  // operand weight row (16-bit elements): 144 bytes

// The lane's ldmatrix addresses of the value product: A = V^T from the stage rows (VR bytes
// apart), B = the operand weights (rows of WROW 16-bit elements); add k0 * VR + 32 m tile and
// 2 (8 nb WROW + k0).
__device__ __forceinline__ uint32_t pv_a_base(const unsigned char *sv, int VR, int lane) {
  return hopper::smem_u32(sv) +
         static_cast<uint32_t>(((lane >> 4) * 8 + (lane & 7)) * VR + 16 * ((lane >> 3) & 1));
}
template <int WROW>
__device__ __forceinline__ uint32_t pv_b_base(const uint16_t *wop, int lane) {
  return hopper::smem_u32(wop) +
         static_cast<uint32_t>(((lane & 7) * WROW + 8 * ((lane >> 3) & 1)) * 2);
}

// One chunk's value product on the tensor cores: N^T[d][g] += V^T[d][k] W^T[k][g] over the
// chunk's keys with a live bit (k steps of 16 keys without one are skipped; every other key of
// a step has weight 0 and a zero or finite value row). Warp `warp` takes m tiles (16 columns)
// warp, warp + 8, .. (D 64: m tile warp % 4, keys of half warp / 4) for every row block; its
// accumulators live in its own N slice ns [kpart][d][RS] (a fixed order: per slice, chunks in
// order; per chunk, the hardware's sum of fixed k steps). A = V^T by ldmatrix.trans of the
// stage rows (VR bytes apart), B = the operand weights wop [RS][kWRow].
template <int D, bool F16, int WROW = kWRow>
__device__ __forceinline__ void pv_mma_chunk(float *ns, const uint16_t *wop,
                                             const unsigned char *sv, int VR, int nrb,
                                             uint64_t live_mask, int warp, int lane) {
  constexpr int MT = D / 16, KP = pv_kparts(D);
  constexpr int MPW = MT >= 8 ? MT / 8 : 1;  // m tiles per warp
  const int RS = 8 * nrb, kpart = MT >= 8 ? 0 : warp / MT;
  const int mg = lane >> 2, mt = lane & 3;
  const uint32_t sv_a = pv_a_base(sv, VR, lane), b_base = pv_b_base<WROW>(wop, lane);
#pragma unroll
  for (int mi = 0; mi < MPW; ++mi) {
    const int mtile = MT >= 8 ? warp + 8 * mi : warp % MT;
    float *nsl = ns + static_cast<size_t>(kpart) * D * RS;
    for (int nb = 0; nb < nrb; ++nb) {
      float2 *c01 = reinterpret_cast<float2 *>(nsl + (16 * mtile + mg) * RS + 8 * nb + 2 * mt);
      float2 *c23 = reinterpret_cast<float2 *>(nsl + (16 * mtile + mg + 8) * RS + 8 * nb + 2 * mt);
      float c[4];
      bool any = false;
#pragma unroll
      for (int kk = 0; kk < kChunk / (16 * KP); ++kk) {
        const int k0 = kpart * (kChunk / KP) + 16 * kk;
        if (((live_mask >> k0) & 0xffffull) == 0) continue;
        if (!any) {
          const float2 x = *c01, y = *c23;
          c[0] = x.x;
          c[1] = x.y;
          c[2] = y.x;
          c[3] = y.y;
          any = true;
        }
        uint32_t a[4], bw[2];
        ldsm_x4_trans(a, sv_a + static_cast<uint32_t>(k0 * VR + 32 * mtile));
        ldsm_x2(bw, b_base + static_cast<uint32_t>((8 * nb * WROW + k0) * 2));
        mma_16<F16>(c, a, bw[0], bw[1]);
      }
      if (any) {
        *c01 = make_float2(c[0], c[1]);
        *c23 = make_float2(c[2], c[3]);
      }
    }
  }
}

// The lane's two ldmatrix bases of pv_mma_chunk_acc_at for the stage sv and operand weights
// wop, with the warp's m tile and key part folded in: A = pv_a_base + kpart's first key * VR + 32
// m tile, B = pv_b_base + 2 * kpart's first key. pv_mma_chunk_acc_at adds only 16 kk * VR and
// 2 (8 nb WROW + 16 kk), compile-time constants.
// SWZ: the stage's pieces swizzled by row (split2_vrow); the lane's row is 8 (lane / 16) +
// lane % 8 past a multiple of 8 (kfirst and pv_mma_chunk_acc_at's 16 kk), so its piece is
// (2 m tile + (lane / 8) % 2) ^ (lane % 8).
template <int D, int WROW, bool SWZ = false>
__device__ __forceinline__ void pv_acc_bases(const unsigned char *sv, const uint16_t *wop, int VR,
                                             int warp, int lane, uint32_t &a_base,
                                             uint32_t &b_base) {
  constexpr int MT = D / 16, KP = pv_kparts(D);
  const int kpart = MT >= 8 ? 0 : warp / MT, mtile = MT >= 8 ? warp : warp % MT;
  const int kfirst = kpart * (kChunk / KP);
  if constexpr (SWZ)
    a_base = hopper::smem_u32(sv) +
             static_cast<uint32_t>((kfirst + (lane >> 4) * 8 + (lane & 7)) * VR +
                                   16 * ((2 * mtile + ((lane >> 3) & 1)) ^ (lane & 7)));
  else
    a_base = pv_a_base(sv, VR, lane) + static_cast<uint32_t>(kfirst * VR + 32 * mtile);
  b_base = pv_b_base<WROW>(wop, lane) + static_cast<uint32_t>(kfirst * 2);
}
// pv_mma_chunk with one m tile per warp and NB row blocks (split2: G <= 16, D 64 / 128), the
// warp's accumulators in registers for the whole split instead of loaded from and stored to its
// N slice per chunk (their address arithmetic and the loads' latency before each chunk's first
// mma were ~5% of split2's instructions). The same mma's in the same order from the same 0.0f,
// so the same bits; pv_acc_store writes them to the slice pv_mma_chunk would have left. The
// bases come from pv_acc_bases, computed by the caller once and pinned (split2: once per split,
// each 64-key half adding its stage and weight offsets as constants): computed in here, ptxas
// rebuilt both addresses in every conditional 16-key step (~10 integer instructions each).
//
// V8 (split2's v8 stage: rows of plane A then plane B, D bytes each; a_base from pv_a_base_v8 in
// decode_split2.cuh): one ldmatrix.x4.trans of both planes' bytes per 16-key step, each plane
// widened exactly to bf16 (e4m3_fragment: plane B divided by 8), two mma per row block (plane
// A, then plane B / 8) on the same bf16 weights; the accumulators' rows are then columns
// 16 mtile + 2g (c0, c1) and + 2g + 1 (c2, c3) (pv_acc_store's V8).
template <int D, bool F16, int WROW, int NB, bool V8 = false>
__device__ __forceinline__ void pv_mma_chunk_acc_at(float (&c)[NB][4], uint32_t a_base,
                                                    uint32_t b_base, int VR, uint64_t live_mask,
                                                    int warp) {
  constexpr int MT = D / 16, KP = pv_kparts(D);
  static_assert(MT <= 8, "one m tile per warp");
  static_assert(!V8 || !F16, "v8 weights are bf16 operands");
  const int kpart = MT >= 8 ? 0 : warp / MT;
  const uint64_t mask = live_mask >> (kpart * (kChunk / KP));  // the warp's keys from bit 0
#pragma unroll
  for (int kk = 0; kk < kChunk / (16 * KP); ++kk) {
    if (((mask >> (16 * kk)) & 0xffffull) == 0) continue;
    uint32_t a[4], a2[4];
    if constexpr (V8) {
      ldsm_e4m3_planes(a_base + static_cast<uint32_t>(16 * kk * VR), a, a2);
    } else {
      ldsm_x4_trans(a, a_base + static_cast<uint32_t>(16 * kk * VR));
    }
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {  // (each accumulator's k steps in the same order)
      uint32_t bw[2];
      ldsm_x2(bw, b_base + static_cast<uint32_t>((8 * nb * WROW + 16 * kk) * 2));
      mma_16<F16>(c[nb], a, bw[0], bw[1]);
      if constexpr (V8) mma_16<F16>(c[nb], a2, bw[0], bw[1]);
    }
  }
}
// The accumulators of pv_mma_chunk_acc_at into the warp's N slice ns [kpart][d][RS] (V8: the v8
// column map, row g of the m tile at column 16 mtile + 2g, row g + 8 at 16 mtile + 2g + 1).
template <int D, int NB, bool V8 = false>
__device__ __forceinline__ void pv_acc_store(float *ns, const float (&c)[NB][4], int RS, int warp,
                                             int lane) {
  constexpr int MT = D / 16;
  const int kpart = MT >= 8 ? 0 : warp / MT, mtile = MT >= 8 ? warp : warp % MT;
  const int mg = lane >> 2, mt = lane & 3;
  float *nsl = ns + static_cast<size_t>(kpart) * D * RS;
  // (Rows g and g + 8 of the m tile: columns 16 mtile + g / + g + 8, or V8's 2g / 2g + 1.)
  const int d0 = 16 * mtile + (V8 ? 2 * mg : mg), dstep = V8 ? 1 : 8;
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) {
    float *c01 = nsl + d0 * RS + 8 * nb + 2 * mt;
    *reinterpret_cast<float2 *>(c01) = make_float2(c[nb][0], c[nb][1]);
    *reinterpret_cast<float2 *>(c01 + dstep * RS) = make_float2(c[nb][2], c[nb][3]);
  }
}

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Bits 4i (i < 8) of a warp ballot, packed: the keys of the warp's 8 four-lane groups.
// (Three shift-or steps instead of eight bit moves: the warp issues this for its lane 0 every
// chunk.)
__device__ __forceinline__ unsigned int pack_keys(unsigned int ballot) {
  unsigned int x = ballot & 0x11111111u;  // bits 4i
  x = (x | (x >> 3)) & 0x03030303u;       // bits 8j, 8j + 1
  x = (x | (x >> 6)) & 0x000f000fu;       // bits 16h .. 16h + 3
  return (x | (x >> 12)) & 0xffu;
}

// A split's read statistics: pass 0 into its group's counters (add_step_stats adds them
// once the guard's verdict is final), pass 1 (recomputed groups) straight into `stats`.
__device__ __forceinline__ void add_split_stats(const DecodeCache &c, const Ws &ws, int64_t *stats,
                                                int pass, int b, int hk, int64_t keys, int64_t live,
                                                int64_t ref, int64_t vref, int64_t bytes) {
  if (pass == 0) {
    unsigned long long *gc = ws.gcnt + (static_cast<int64_t>(b) * c.n_kv_heads + hk) * 5;
    stat_add(gc + 0, keys);
    stat_add(gc + 1, live);
    stat_add(gc + 2, ref);
    stat_add(gc + 3, vref);
    stat_add(gc + 4, bytes);
  } else {
    stat_add(stat_ptr(stats, kKeys), keys);
    stat_add(stat_ptr(stats, kLive), live);
    stat_add(stat_ptr(stats, kRefine), ref);
    stat_add(stat_ptr(stats, kVRefine), vref);
    stat_add(stat_ptr(stats, kBytes), bytes);
  }
}

// The four integer dots of row block rb against the lane's two keys (both split kernels):
// ca = q planes x key plane A, cb = q planes x key plane B, over the NP register pieces of
// the key (qfrag: the q planes as A fragments, [rb][slice][lane]).
template <int NP>
__device__ __forceinline__ void fine_dots(const uint4 *qfrag, int rb, int lane, const int4 *ka,
                                          const int4 *kb, int32_t ca[4], int32_t cb[4]) {
#pragma unroll
  for (int i = 0; i < NP; ++i) {
    const uint4 a0 = qfrag[(rb * 2 * NP + 2 * i) * 32 + lane];
    const uint4 a1 = qfrag[(rb * 2 * NP + 2 * i + 1) * 32 + lane];
    mma_s8(ca, a0, ka[i].x, ka[i].y);
    mma_s8(ca, a1, ka[i].z, ka[i].w);
    mma_s8(cb, a0, kb[i].x, kb[i].y);
    mma_s8(cb, a1, kb[i].z, kb[i].w);
  }
}

// The coarse dots of row block rb against the lane's two keys (both screened splits): q planes x
// key plane A only (the screen's logit), as fine_dots' ca.
template <int NP>
__device__ __forceinline__ void coarse_dots(const uint4 *qfrag, int rb, int lane, const int4 *ka,
                                            int32_t cc[4]) {
#pragma unroll
  for (int i = 0; i < NP; ++i) {
    mma_s8(cc, qfrag[(rb * 2 * NP + 2 * i) * 32 + lane], ka[i].x, ka[i].y);
    mma_s8(cc, qfrag[(rb * 2 * NP + 2 * i + 1) * 32 + lane], ka[i].z, ka[i].w);
  }
}

// A key's weight for one row (both screened splits, in the CPU reference's arithmetic): a live
// key's 2^(ell - Z), with ell the fine logit when refined (the integer dots ca / cb of the lane's
// key j, the multiplier from the row's and key's scales) else the coarse one, s_A; pw is it rounded
// to the value operand. A cut key's 2^(s_A - Z) is its cut mass.
struct KeyWeight {
  float pw = 0.0f, pex = 0.0f, cut = 0.0f;  // live: value operand, unrounded; cut: mass
};
__device__ __forceinline__ KeyWeight key_weight(bool live, bool refined, const int32_t *ca,
                                                const int32_t *cb, int j, float sq, float sk,
                                                int shift, float z, bool pf16, float s_a) {
  KeyWeight k;
  if (!live) {
    k.cut = exp2_fp(sub_rn(s_a, z));
    return k;
  }
  const float ell =
      refined ? fine_logit(ca[j], ca[2 + j], cb[j], cb[2 + j], logit_multiplier(sq, sk, shift))
              : s_a;
  k.pex = exp2_fp(sub_rn(ell, z));
  k.pw = round_operand(k.pex, pf16);
  return k;
}

// Value formats of the stage rows: bf16 / fp16 V (2 D bytes), or v8 planes A | B (D + D).
enum ValueFormat { kVBf16 = 0, kVF16 = 1, kVV8 = 2 };

// C columns of key k's values from its stage row, from column c0.
// Two 16-bit values per word (bf16 or fp16) to floats, low half first.
template <int C, int VF>
__device__ __forceinline__ void words_to_floats(const uint32_t (&wd)[C / 2], float (&v)[C]) {
#pragma unroll
  for (int i = 0; i < C / 2; ++i) {
    if (VF == kVF16) {
      v[2 * i] = __half2float(__ushort_as_half(static_cast<unsigned short>(wd[i] & 0xffffu)));
      v[2 * i + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(wd[i] >> 16)));
    } else {
      v[2 * i] = __uint_as_float(wd[i] << 16);
      v[2 * i + 1] = __uint_as_float(wd[i] & 0xffff0000u);
    }
  }
}

template <int C, int VF>
__device__ __forceinline__ void load_values(const unsigned char *row, int D, int c0, bool vref,
                                            float sx, const float *lut, float (&v)[C]) {
  if (VF == kVV8) {
    // v8_value's operations with E4M3 decoded by the table (e4m3_to_float of every byte) and
    // 2^vexp hoisted: the same floats.
#pragma unroll
    for (int c = 0; c < C; ++c) {
      float u = lut[row[c0 + c]];
      if (vref) u = add_rn(u, mul_rn(lut[row[D + c0 + c]], 0.125f));
      v[c] = mul_rn(u, sx);
    }
  } else {
    uint32_t wd[C / 2];
    if (C == 2) {
      wd[0] = *reinterpret_cast<const uint32_t *>(row + 2 * c0);
    } else {
      const uint2 u = *reinterpret_cast<const uint2 *>(row + 2 * c0);
      wd[0] = u.x;
      wd[C / 2 - 1] = u.y;
    }
    words_to_floats<C, VF>(wd, v);
  }
}

// One warp's item of a chunk's value product: the keys k0 + i for the set bits i of `mask` (a
// slice's live keys, at most 32) in index order x rows 8 rb .. 8 rb + 7 x the lane's C
// columns from c0, one fma per key and column, added to the slice's partial N (nsl, [G][D] in
// shared memory). A full mask of n keys (dense chunks) walks k0 .. k0 + n - 1 directly (the
// bit walk cost ~10 instructions per key, more than half the fmas at C = 2). The weights of a
// key's 8 rows are contiguous in wt (transposed copy, zero for rows >= G): two broadcast loads.
template <int C, int VF>
__device__ __forceinline__ void pv_item(float *nsl, const float *wt, int rs, int rb, int G, int D,
                                        int c0, const unsigned char *stage, int vrow,
                                        const int *flags, int k0, uint32_t mask, float sx,
                                        const float *lut) {
  float acc[8][C];
#pragma unroll
  for (int r = 0; r < 8; ++r) {
    const int g = 8 * rb + r;
#pragma unroll
    for (int c = 0; c < C; ++c) acc[r][c] = g < G ? nsl[g * D + c0 + c] : 0.0f;
  }
  auto step = [&](int k) {
    float v[C];
    load_values<C, VF>(stage + k * vrow, D, c0, VF == kVV8 && (flags[k] & kFlagVRefine) != 0, sx,
                       lut, v);
    const float4 w0 = *reinterpret_cast<const float4 *>(wt + k * rs + 8 * rb);
    const float4 w1 = *reinterpret_cast<const float4 *>(wt + k * rs + 8 * rb + 4);
    const float wr[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
    for (int r = 0; r < 8; ++r)
#pragma unroll
      for (int c = 0; c < C; ++c) acc[r][c] = fma_rn(wr[r], v[c], acc[r][c]);
  };
  const int n = __popc(mask);
  if (VF != kVV8 && C == 2 && mask == (n == 32 ? 0xffffffffu : (1u << n) - 1u)) {
    // Dense part, software-pipelined by hand (unrolling spilled at 80 registers): key i + 1's
    // value words and weights are loaded before key i's fmas, so the shared-memory latency
    // overlaps the fmas instead of preceding them (ncu: short-scoreboard stalls on these).
    // D 64 / 128 only: at D 256 (C = 4) the extra registers spilled.
    auto raw_at = [&](int k) {
      return *reinterpret_cast<const uint32_t *>(stage + k * vrow + 2 * c0);
    };
    uint32_t vr = raw_at(k0);
    float4 w0 = *reinterpret_cast<const float4 *>(wt + k0 * rs + 8 * rb);
    float4 w1 = *reinterpret_cast<const float4 *>(wt + k0 * rs + 8 * rb + 4);
#pragma unroll 1
    for (int i = 0; i < n; ++i) {
      const uint32_t cur[1] = {vr};
      const float wr[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
      const int kn = k0 + (i + 1 < n ? i + 1 : i);  // the last step reloads its own key
      vr = raw_at(kn);
      w0 = *reinterpret_cast<const float4 *>(wt + kn * rs + 8 * rb);
      w1 = *reinterpret_cast<const float4 *>(wt + kn * rs + 8 * rb + 4);
      float v[2];
      words_to_floats<2, VF>(cur, v);
#pragma unroll
      for (int r = 0; r < 8; ++r)
#pragma unroll
        for (int c = 0; c < 2; ++c) acc[r][c] = fma_rn(wr[r], v[c], acc[r][c]);
    }
  } else if (mask == (n == 32 ? 0xffffffffu : (1u << n) - 1u)) {
#pragma unroll 1
    for (int i = 0; i < n; ++i) step(k0 + i);
  } else {
    for (uint32_t m = mask; m != 0; m &= m - 1) step(k0 + __ffs(static_cast<int>(m)) - 1);
  }
#pragma unroll
  for (int r = 0; r < 8; ++r) {
    const int g = 8 * rb + r;
    if (g < G)
#pragma unroll
      for (int c = 0; c < C; ++c) nsl[g * D + c0 + c] = acc[r][c];
  }
}

// The value-product items of one chunk (decode_plan.h pv_slices): warp `warp` takes items
// (slice, block of 8 rows, column part) in turn; per item, the slice's live keys (live_mask)
// in index order, in parts of at most 32 keys: part(nsl, rb, c0, k0, m) adds keys k0 + bits of
// m into the slice's sums nsl.
template <int D, class Part>
__device__ __forceinline__ void for_each_pv_part(int warp, int lane, int NS, int nrb, int G,
                                                 float *ns, uint64_t live_mask, const Part &part) {
  constexpr int C = pv_cols(D), HV = pv_halves(D);
  const int per = kChunk / NS;  // keys per slice and chunk
  for (int it = warp; it < NS * nrb * HV; it += kThreads / 32) {
    const int h = it % HV, rb = (it / HV) % nrb, sl = it / (HV * nrb);
    float *nsl = ns + sl * G * D;
    const int c0 = (h * 32 + lane) * C;
    for (int k0 = sl * per; k0 < (sl + 1) * per; k0 += 32) {
      const uint32_t m =
          static_cast<uint32_t>(live_mask >> k0) & (per >= 32 ? 0xffffffffu : (1u << per) - 1u);
      if (m == 0) continue;
      part(nsl, rb, c0, k0, m);
    }
  }
}

// The row sums of the tensor-core paths (split_item with MMA, split2): T, T_lse and the cut mass
// of a 64-key chunk as a fixed tree, not key by key. Lane (g, t) of warp w holds keys 8 w + 2 t
// and 8 w + 2 t + 1 of the chunk for its row: their pair, then the four lanes' butterfly (xor 1,
// xor 2) gives the warp's 8-key sum; the chunk's sum is the eight warps' sums as a balanced tree
// (warp_tree8), and the running sums add the chunks in key order. (A serial sum of 64 keys per
// chunk, by one thread per row, held the rest of the block at the end-of-chunk barrier: notes/
// decode.md section 22.) The CPU reference and the v8 path keep the serial order; the sums differ
// from theirs only in fp32 rounding, and every GPU path of a request uses this one, so its bits
// still do not depend on the batch.
__device__ __forceinline__ float quad_sum(float x) {
  x = add_rn(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return add_rn(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
// x[0], x[st], ..., x[7 st]: ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7)).
__device__ __forceinline__ float warp_tree8(const float *x, int st) {
  return add_rn(add_rn(add_rn(x[0], x[st]), add_rn(x[2 * st], x[3 * st])),
                add_rn(add_rn(x[4 * st], x[5 * st]), add_rn(x[6 * st], x[7 * st])));
}

// Bit i (1 <= i < n): the 64-key chunk at s0 + 64 i starts a page (page sizes are multiples of
// 64, so pages start only at chunks). One thread computes it per split (one division), instead of
// every thread a modulo per chunk.
__device__ __forceinline__ uint32_t page_starts(int32_t s0, int n, int P) {
  static_assert(kSplitKeys / kChunk <= 32, "a bit per chunk of a split");
  uint32_t m = 0u;
  int x = s0 % P;  // (s0 + 64 i) mod P
  for (int i = 1; i < n; ++i) {
    x = x + kChunk == P ? 0 : x + kChunk;
    m |= (x == 0 ? 1u : 0u) << i;
  }
  return m;
}
