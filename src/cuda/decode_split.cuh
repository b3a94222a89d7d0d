// The plain split kernel: one split of kSplitKeys keys of one (request, KV head) group.
//
// 256 threads walk the split in chunks of 64 keys (a chunk never straddles a page, so its
// keys are 64 consecutive cache rows). Screen: 4 threads per key, each holding a quarter of
// the key's planes in registers (16-byte pieces u, u + 4, ... : a warp's load reads 8 keys x
// 64 contiguous bytes); the integer dots of the warp's 8 keys against 8 rows at a time on
// the int8 tensor cores (q planes A and B as the MMA's 16 rows; exact, so any order). Values:
// cp.async 16-byte copies into a shared stage (dense: the whole chunk, double-buffered one chunk
// ahead; else only the live keys, plane B of K only for the refined ones). The next chunk's planes
// are loaded into registers while the current one is weighted and multiplied. Orders that the
// output's bits depend on are the reference's: N[slice][g][d] one thread each, the slice's live
// keys in index order (decode_plan.h pv_slices);
// T, T_lse and the cut mass one thread per row, keys in index order; page flushes in page order.
// Included by decode.cu inside its anonymous namespace, after decode_split_parts.cuh.

// Split s of group (b, hk), 256 threads, D = 64 NP (decode_split_kernel's item). Pass 0: every
// group; pass 1: only the groups the guard flagged. MMA (bf16 / fp16 V): the value product on the
// tensor cores (pv_mma_chunk; N within one rounding of the reference's, not bit for bit); else (v8)
// one fma per key, row and column in the reference's order.
// WIN: the sliding window p.window_before (decode_step.cpp): the split sees keys [F, L) only,
// F = window_first(L, w). A split wholly before F returns at once (no partial: the combine starts
// at F's split); the split holding F starts at F's chunk, and its keys before F are absent like
// the keys past the split's end (never read, neither live nor cut, not counted; the dense stage's
// rows of them are zeroed for the value product's weight-0 columns). F = 0 (no window, or one
// that hides nothing) runs the same operations in the same order as WIN = false: the same bits.
template <int NP, bool MMA, bool WIN = false>
__device__ __forceinline__ void split_item(const DecodeCache &c, const fold_decode_params_t &p,
                                           const Ws &ws, const int pass, int64_t *stats,
                                           const int s, const int hk, const int b) {
  constexpr int D = 64 * NP;
  constexpr int WS = kWS;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int s_flags[kChunk];
  __shared__ __align__(8) unsigned char s_live8[kChunk / 8], s_cut8[kChunk / 8];
  __shared__ int32_t s_page_last[kPagesPerSplit];
  __shared__ uint32_t s_wcount[kThreads / 32];  // per warp, bytes: keys, live, refined, v-refined
  __shared__ float s_e4m3[256];                 // v8: e4m3_to_float of every byte
  __shared__ int64_t s_rowbase[kSplitKeys / kChunk];      // cache row of each chunk
  __shared__ uint32_t s_newpage;                          // bit i: chunk i starts a page
  __shared__ __align__(16) uint16_t s_scale[kSplitKeys];  // the split's key scales (bf16 bits)
  const int32_t L = c.lengths[b];
  const int32_t s0 = s * kSplitKeys;
  if (s0 >= L) return;
  // WIN: the window's first key; a split wholly before it adds nothing (uniform).
  const int32_t F = WIN ? window_first(L, p.window_before) : 0;
  if (WIN && s0 + kSplitKeys <= F) return;
  if (pass == 1 && ws.flag[static_cast<int64_t>(b) * c.n_kv_heads + hk] == 0) return;
  const int32_t s1 = min(L, s0 + kSplitKeys);
  // The split's first key lo (WIN: F in F's split), its chunk ci0 and that chunk's first key jf.
  const int32_t lo = WIN ? max(s0, F) : s0;
  const int ci0 = WIN ? (lo - s0) / kChunk : 0;
  const int32_t jf = s0 + ci0 * kChunk;
  const int H = p.n_heads, G = H / c.n_kv_heads, P = c.page_size;
  const int log2d = log2_pow2(D), tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int kq = tid >> 2, u = tid & 3;  // screen: key kq of the chunk, quarter u
  const bool dense = p.dense != 0, v8 = c.v8 != 0, pf16 = c.dtype == FOLD_DTYPE_F16 && !v8;
  const int nrb = (G + 7) / 8, NS = fold::decode::pv_slices(G), RS = 8 * nrb;
  constexpr int VR = pv_vrow(D, MMA);                          // bytes of a stage row
  unsigned char *stage = smem;                                 // [2][64][VR]
  float *ns = reinterpret_cast<float *>(stage + 2 * 64 * VR);  // N's slices:
  const int nsz = MMA ? pv_kparts(D) * RS * D : NS * G * D;    // [kpart][D][RS] | [NS][G][D]
  float *w = ns + nsz;
  float *pe = w + (MMA ? 0 : G * WS);  // v8 only (the MMA path sums by quad_sum / warp_tree8)
  float *wt = pe + G * WS;  // [64][RS]: the value operands, transposed (zero for rows >= G)
  // MMA: the operand weights' bits [RS][kWRow] in wt's place (zero for rows >= G and for keys
  // without a live bit).
  uint16_t *wop = reinterpret_cast<uint16_t *>(wt);
  // q planes as A fragments: [row block of 8][slice s < 2 NP][lane] (uint4 = a0..a3).
  uint4 *qfrag = reinterpret_cast<uint4 *>(wt + kChunk * RS);
  float *f = reinterpret_cast<float *>(qfrag + nrb * 2 * NP * 32);
  float *sq = f, *zr = f + G, *thr_live = f + 2 * G, *thr_ref = f + 3 * G, *thr_vref = f + 4 * G;
  float *ts = f + 5 * G, *tlse = f + 6 * G, *cut = f + 7 * G, *page_cut = f + 8 * G;
  float *wsum = page_cut + kPagesPerSplit * G;  // MMA: [T, T_lse, cut][warp][RS], a chunk's

  const int64_t row0 = static_cast<int64_t>(b) * H + hk * G;
  // Lane (g, t) of slice s = 2 i + h feeds the key bytes at 16 (t + 4 i) + 8 h (b0) and + 4
  // (b1): the words 2h, 2h + 1 of its register piece i (load_planes); its A registers hold
  // the q bytes at the same offsets, of row 8 rb + g (plane A as row g, plane B as g + 8).
  for (int e = tid; e < nrb * 2 * NP * 32; e += blockDim.x) {
    const int ln = e % 32, sl = (e / 32) % (2 * NP), rb = e / (32 * 2 * NP);
    const int r = 8 * rb + (ln >> 2);
    const int o = 16 * ((ln & 3) + 4 * (sl >> 1)) + 8 * (sl & 1);
    uint4 a = make_uint4(0u, 0u, 0u, 0u);
    if (r < G) {
      const uint32_t *qa32 = reinterpret_cast<const uint32_t *>(ws.qa + (row0 + r) * D + o);
      const uint32_t *qb32 = reinterpret_cast<const uint32_t *>(ws.qb + (row0 + r) * D + o);
      a = make_uint4(qa32[0], qb32[0], qa32[1], qb32[1]);
    }
    qfrag[e] = a;
  }
  for (int g = tid; g < G; g += blockDim.x) {
    const float z = ws.z[row0 + g];
    sq[g] = ws.sq[row0 + g];
    zr[g] = z;
    // Pass 1 (a flagged group) cuts nothing: every key live and refined, as the CPU reference's
    // second pass (decode_step.cpp; a cut decided on a coarse logit far off the fine one can drop
    // the row's heaviest key, notes/decode.md section 40).
    const float none = __uint_as_float(0xff800000u);
    thr_live[g] = pass == 1 ? none : sub_rn(z, p.depth);
    thr_ref[g] = pass == 1 ? none : sub_rn(z, p.refine_band);
    thr_vref[g] = pass == 1 ? none : sub_rn(z, p.v_refine_band);
    ts[g] = 0.0f;
    tlse[g] = 0.0f;
    cut[g] = 0.0f;
  }
  // Keys whose coarse logit may be a binade or more off are live and refined (planes.h,
  // coarse_untrusted; pass 1 cuts nothing anyway).
  const float e_max = dense || pass == 1 ? 0.0f : group_e_max(ws, row0, G);
  for (int e = tid; e < nsz; e += blockDim.x) ns[e] = 0.0f;
  for (int e = tid; e < kChunk * RS; e += blockDim.x) wt[e] = 0.0f;
  const int vexp = v8 ? v8_exponent(c, b, hk) : 0;
  if (v8)
    for (int i = tid; i < 256; i += blockDim.x) s_e4m3[i] = e4m3_to_float(static_cast<uint8_t>(i));
  const size_t vrow = VR;

  // The cache row of the chunk at j0 (its keys are consecutive rows), from the split's table
  // (one page-table lookup and division per chunk, not one per use and thread).
  const int nchunks = (s1 - s0 + kChunk - 1) / kChunk;
  // (WIN: the chunks before ci0 are never looked up, nor their pages.)
  if (tid < nchunks && (!WIN || tid >= ci0)) s_rowbase[tid] = key_row(c, b, hk, s0 + tid * kChunk);
  if (tid == 0) s_newpage = page_starts(s0, nchunks, P);  // (read after the first barrier)
  auto chunk_row = [&](int32_t j0) {
    return j0 > jf ? s_rowbase[(j0 - s0) / kChunk] : key_row(c, b, hk, j0);
  };
  // WIN: the first key of the window in F's chunk (keys [0, klo0) of chunk ci0 are before it;
  // every later chunk's are in it: klo = 0).
  const int klo0 = WIN ? lo - jf : 0;
  // Planes of the chunk at j0 for this thread's quarter of key kq (zeros past the split, and
  // WIN before the chunk's first window key klo).
  auto load_planes = [&](int32_t j0, int4 *a, int4 *bp, bool with_b, int klo) {
    const int nk = min(kChunk, s1 - j0);
    if (WIN ? kq >= klo && kq < nk : kq < nk) {
      const int64_t r = chunk_row(j0) + kq;
      const int4 *pa = reinterpret_cast<const int4 *>(c.k_a + r * D);
#pragma unroll
      for (int i = 0; i < NP; ++i) a[i] = pa[u + 4 * i];
      if (with_b) {
        const int4 *pb = reinterpret_cast<const int4 *>(c.k_b + r * D);
#pragma unroll
        for (int i = 0; i < NP; ++i) bp[i] = pb[u + 4 * i];
      }
    } else {
#pragma unroll
      for (int i = 0; i < NP; ++i) a[i] = bp[i] = make_int4(0, 0, 0, 0);
    }
  };
  // Dense: the chunk's values (every present key, both v8 planes) into stage `st`.
  auto stage_chunk = [&](int32_t j0, int st, int klo) {
    const int nk = min(kChunk, s1 - j0);
    const int64_t rb = chunk_row(j0);
    unsigned char *dst = stage + st * 64 * vrow;
    constexpr int pieces = 2 * D / 16;  // per key
    for (int e = (WIN ? klo * pieces : 0) + tid; e < nk * pieces; e += blockDim.x) {
      const int k = e / pieces, q16 = e % pieces;
      const unsigned char *src;
      if (v8)
        src = q16 < D / 16 ? c.v_a + (rb + k) * D + 16 * q16
                           : c.v_b + (rb + k) * D + 16 * (q16 - D / 16);
      else
        src = static_cast<const unsigned char *>(c.v) + (rb + k) * 2 * D + 16 * q16;
      cp_async16(dst + k * vrow + 16 * q16, src);
    }
    cp_async_commit();
  };

  int4 ka[NP], kb[NP], ka_n[NP], kb_n[NP];
#pragma unroll
  for (int i = 0; i < NP; ++i) ka[i] = kb[i] = ka_n[i] = kb_n[i] = make_int4(0, 0, 0, 0);
  // The split's key scales, all at once into shared memory (8 chunks x 8 copies of 8 scales;
  // a chunk's 64 keys are consecutive cache rows, 128-byte aligned): a scale loaded into a
  // register with the next chunk's planes made every warp wait for it at once (ncu: the
  // conversion stalled on the load; kept raw, ptxas spilled it and the spill store stalled).
  // Scales past the split's end are read from the same pages and never used.
  if (tid < nchunks * 8 && (!WIN || tid >= ci0 * 8)) {
    const int64_t r = key_row(c, b, hk, s0 + (tid >> 3) * kChunk) + 8 * (tid & 7);
    cp_async16(s_scale + 8 * tid, c.k_scale + r);
  }
  cp_async_commit();
  load_planes(jf, ka, kb, dense, klo0);
  if (dense) {
    stage_chunk(jf, WIN ? (ci0 & 1) : 0, klo0);
    cp_async_wait<1>();  // the scales (the first chunk's values may stay in flight)
  } else {
    cp_async_wait<0>();
  }
  __syncthreads();

  int n_pages = 0;
  bool page_has_cut = false;
  // A warp counts at most 8 keys per chunk: its bytes in s_wcount never carry.
  static_assert(kSplitKeys / kChunk * 8 <= 255, "a warp's count per byte must not carry");
  if (lane == 0) s_wcount[warp] = 0u;
  // MMA, gathers: whether stage row kq may hold a value (a live key's, or never written): a row
  // without a live key is zeroed before the value product reads it (weight 0 x value must be 0).
  bool row_held = true;
  for (int ci = ci0; ci < nchunks; ++ci) {
    const int32_t j0 = s0 + ci * kChunk;
    const int nk = min(kChunk, s1 - j0);
    const int klo = WIN && ci == ci0 ? klo0 : 0;  // (WIN: keys [0, klo) are before the window)
    const int st = dense ? (ci & 1) : 0;
    const bool present = WIN ? kq >= klo && kq < nk : kq < nk;
    const bool more = ci + 1 < nchunks;
    bool live = dense, refine = dense, vref = dense && v8;
    // MMA layout: lane (g, t) computes rows 8 rb + g against keys 8 warp + 2t + j (j < 2); the
    // screen layout (key kq, quarter u) holds the planes. Scales of the MMA layout's keys:
    const int mg = lane >> 2, mt = lane & 3;
    const float skj[2] = {bf16_bits_to_float(s_scale[j0 - s0 + 8 * warp + 2 * mt]),
                          bf16_bits_to_float(s_scale[j0 - s0 + 8 * warp + 2 * mt + 1])};
    int vbits = dense ? 0x3f : 0;  // keys 2t (bits 0-2), 2t + 1 (bits 3-5); OR over rows
    if (!dense) {
      // Coarse logits (plane A) and verdict bits.
      for (int rb = 0; rb < nrb; ++rb) {
        int32_t cc[4] = {0, 0, 0, 0};
        coarse_dots<NP>(qfrag, rb, lane, ka, cc);
        const int r = 8 * rb + mg;
        if (r < G) {
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const float sa =
                coarse_logit(cc[j], cc[2 + j], logit_multiplier(sq[r], skj[j], 8 + log2d));
            vbits |= ((sa >= thr_live[r] ? 1 : 0) | (sa >= thr_ref[r] ? 2 : 0) |
                      (v8 && sa >= thr_vref[r] ? 4 : 0))
                     << (3 * j);
            w[r * WS + 8 * warp + 2 * mt + j] = sa;
          }
        }
      }
      // The coarse-error rule depends on the key only: every lane of a key may report it.
#pragma unroll
      for (int j = 0; j < 2; ++j) vbits |= coarse_untrusted(skj[j], e_max) ? 3 << (3 * j) : 0;
      vbits |= __shfl_xor_sync(0xffffffffu, vbits, 4);
      vbits |= __shfl_xor_sync(0xffffffffu, vbits, 8);
      vbits |= __shfl_xor_sync(0xffffffffu, vbits, 16);
      // The screen layout's key kq = 8 warp + (lane >> 2) is key 2t + j of the MMA lanes with
      // t = lane >> 3, j = (lane >> 2) & 1.
      const int mine = __shfl_sync(0xffffffffu, vbits, lane >> 3) >> (3 * ((lane >> 2) & 1));
      live = (mine & 1) != 0;
      refine = (mine & 2) != 0 && live;
      vref = (mine & 4) != 0 && live;
    }
    live = live && present;
    refine = refine && present;
    vref = vref && present;
    if (!MMA && u == 0)  // (only the scalar value product reads the flags)
      s_flags[kq] = present ? (kFlagPresent | (live ? kFlagLive : 0) | (refine ? kFlagRefine : 0) |
                               (vref ? kFlagVRefine : 0))
                            : 0;
    {
      const unsigned int bl = __ballot_sync(0xffffffffu, u == 0 && live);
      const unsigned int bc = __ballot_sync(0xffffffffu, u == 0 && present && !live);
      const unsigned int br = __ballot_sync(0xffffffffu, u == 0 && refine);
      const unsigned int bv = __ballot_sync(0xffffffffu, u == 0 && vref);
      // The read counts into the warp's own word, summed once after the loop (four shared
      // atomics per warp and chunk were ~5% of the screened loop's instructions).
      if (lane == 0) {
        s_live8[warp] = static_cast<unsigned char>(pack_keys(bl));
        s_cut8[warp] = static_cast<unsigned char>(pack_keys(bc));
        s_wcount[warp] +=
            static_cast<uint32_t>(__popc(bl | bc)) | static_cast<uint32_t>(__popc(bl)) << 8 |
            static_cast<uint32_t>(__popc(br)) << 16 | static_cast<uint32_t>(__popc(bv)) << 24;
      }
    }
    if (dense) {
      if (more) {
        stage_chunk(j0 + kChunk, st ^ 1, 0);
        load_planes(j0 + kChunk, ka_n, kb_n, true, 0);
      }
    } else {
      // Gather plane B (refined keys, into registers) and the values (live keys) of this
      // chunk, then start the next chunk's plane A. (After the first barrier: s_rowbase.)
      const int64_t r = s_rowbase[(j0 - s0) / kChunk] + kq;
      if (refine) {
        const int4 *pb = reinterpret_cast<const int4 *>(c.k_b + r * D);
#pragma unroll
        for (int i = 0; i < NP; ++i) kb[i] = pb[u + 4 * i];
      }
      if (live) {
        unsigned char *dst = stage + kq * vrow;
        if (v8) {
#pragma unroll
          for (int i = 0; i < NP; ++i) {
            cp_async16(dst + 16 * (u + 4 * i), c.v_a + r * D + 16 * (u + 4 * i));
            if (vref) cp_async16(dst + D + 16 * (u + 4 * i), c.v_b + r * D + 16 * (u + 4 * i));
          }
        } else {
          const unsigned char *src = static_cast<const unsigned char *>(c.v) + r * 2 * D;
#pragma unroll
          for (int i = 0; i < 2 * NP; ++i)
            cp_async16(dst + 16 * (u + 4 * i), src + 16 * (u + 4 * i));
        }
      } else if (MMA && row_held) {
        unsigned char *dst = stage + kq * vrow;
#pragma unroll
        for (int i = 0; i < 2 * NP; ++i)
          *reinterpret_cast<uint4 *>(dst + 16 * (u + 4 * i)) = make_uint4(0u, 0u, 0u, 0u);
      }
      row_held = live;
      cp_async_commit();
      if (more) load_planes(j0 + kChunk, ka_n, kb_n, false, 0);
    }
    // No barrier here. The weights read only what this thread wrote (its coarse logits in w)
    // and its own registers; the gathers stay in flight until the row sums need them.
    // Weights: live keys 2^(ell - Z) (fine logit if refined, rounded to the value operand),
    // cut keys 2^(s_A - Z); row g's by lane g % 4 of the key's group.
    const bool any_refine = __any_sync(0xffffffffu, refine);
    bool mlive[2], mref[2], mpres[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int bits = vbits >> (3 * j);
      mpres[j] = WIN ? 8 * warp + 2 * mt + j >= klo && 8 * warp + 2 * mt + j < nk
                     : 8 * warp + 2 * mt + j < nk;
      mlive[j] = (bits & 1) != 0 && mpres[j];
      mref[j] = (bits & 2) != 0 && mlive[j];
    }
    for (int rb = 0; rb < nrb; ++rb) {
      int32_t ca[4] = {0, 0, 0, 0}, cb[4] = {0, 0, 0, 0};
      if (any_refine) fine_dots<NP>(qfrag, rb, lane, ka, kb, ca, cb);
      const int r = 8 * rb + mg;
      float vt[2] = {0.0f, 0.0f}, vtl[2] = {0.0f, 0.0f}, vc[2] = {0.0f, 0.0f};  // MMA sums
      if (r < G) {
        float opw[2] = {0.0f, 0.0f};  // the value operands (zero without a live bit)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          if (!mpres[j]) continue;
          const int e = r * WS + 8 * warp + 2 * mt + j;
          const KeyWeight kw = key_weight(mlive[j], mref[j], ca, cb, j, sq[r], skj[j], 16 + log2d,
                                          zr[r], pf16, w[e]);
          opw[j] = kw.pw;
          if (MMA) {
            vt[j] = kw.pw;
            vtl[j] = kw.pex;
            vc[j] = kw.cut;
          } else if (mlive[j]) {
            pe[e] = kw.pex;
            w[e] = kw.pw;
            wt[(8 * warp + 2 * mt + j) * RS + r] = kw.pw;
          } else {
            w[e] = kw.cut;
          }
        }
        if (MMA)
          reinterpret_cast<uint32_t *>(wop + r * kWRow)[4 * warp + mt] =
              pf16 ? pack_operands<true>(opw[0], opw[1]) : pack_operands<false>(opw[0], opw[1]);
      }
      if constexpr (MMA) {  // this warp's 8-key sums of row r (see quad_sum)
        const float st = quad_sum(add_rn(vt[0], vt[1]));
        const float stl = quad_sum(add_rn(vtl[0], vtl[1]));
        const float sc = quad_sum(add_rn(vc[0], vc[1]));
        if (mt == 0 && r < G) {
          wsum[(0 * 8 + warp) * RS + r] = st;
          wsum[(1 * 8 + warp) * RS + r] = stl;
          wsum[(2 * 8 + warp) * RS + r] = sc;
        }
      }
    }
    if (MMA && dense && nk < kChunk) {
      // The split's last, partial chunk: no copy lands in rows nk.. of stage st; zero them.
      unsigned char *sv = stage + st * 64 * vrow;
      for (int e = tid; e < (kChunk - nk) * (VR / 16); e += kThreads)
        reinterpret_cast<uint4 *>(sv + nk * vrow)[e] = make_uint4(0u, 0u, 0u, 0u);
    }
    if (WIN && MMA && dense && klo > 0) {
      // The window's first chunk: no copy lands in rows ..klo - 1 either (keys before F).
      unsigned char *sv = stage + st * 64 * vrow;
      for (int e = tid; e < klo * (VR / 16); e += kThreads)
        reinterpret_cast<uint4 *>(sv)[e] = make_uint4(0u, 0u, 0u, 0u);
    }
    // This thread's copies of the chunk (dense: the next chunk's stay in flight).
    if (dense && more)
      cp_async_wait<1>();
    else
      cp_async_wait<0>();
    __syncthreads();
    const uint64_t live_mask = *reinterpret_cast<const uint64_t *>(s_live8);
    const bool chunk_cut = *reinterpret_cast<const uint64_t *>(s_cut8) != 0;
    // T, T_lse and the cut mass: thread per row, keys in index order; a page's cut mass
    // goes out when the next page starts.
    const bool new_page = ((s_newpage >> ((j0 - s0) / kChunk)) & 1u) != 0;
    // Row g's sums (cut included) belong to one thread, kThreads - 1 - g.
    const int g_first = kThreads - 1 - tid;
    if (new_page && page_has_cut) {
      for (int g = g_first; g < G; g += kThreads) {
        page_cut[n_pages * G + g] = cut[g];
        cut[g] = 0.0f;
      }
      if (tid == 0) s_page_last[n_pages] = j0 - 1;
      n_pages += 1;
    }
    if (new_page) page_has_cut = false;
    page_has_cut = page_has_cut || chunk_cut;
    if constexpr (MMA) {
      // The chunk's sums: the eight warps' (quad_sum), as a tree.
      for (int g = g_first; g < G; g += kThreads) {
        ts[g] = add_rn(ts[g], warp_tree8(wsum + g, RS));
        tlse[g] = add_rn(tlse[g], warp_tree8(wsum + 8 * RS + g, RS));
        cut[g] = add_rn(cut[g], warp_tree8(wsum + 16 * RS + g, RS));
      }
    } else {
      // Keys in index order, live to T and T_lse, cut to the cut mass, by the block's last
      // threads, float4 loads from the padded rows, liveness from the chunk's mask.
      for (int g = g_first; g < G; g += kThreads) {
        float t = ts[g], tl = tlse[g], cu = cut[g];
        if (WIN && klo > 0) {
          // The window's first chunk: its keys from klo, in index order (w and pe hold nothing
          // for the keys before it).
          for (int k = klo; k < nk; ++k) {
            const float wv = w[g * WS + k];
            if ((live_mask >> k) & 1ull) {
              t = add_rn(t, wv);
              tl = add_rn(tl, pe[g * WS + k]);
            } else {
              cu = add_rn(cu, wv);
            }
          }
          ts[g] = t;
          tlse[g] = tl;
          cut[g] = cu;
          continue;
        }
        const float4 *w4 = reinterpret_cast<const float4 *>(w + g * WS);
        const float4 *p4 = reinterpret_cast<const float4 *>(pe + g * WS);
        const int nk4 = nk & ~3;
#pragma unroll 2
        for (int k = 0; k < nk4; k += 4) {
          const float4 wv = w4[k / 4], pv = p4[k / 4];
          const unsigned int lm = static_cast<unsigned int>(live_mask >> k) & 15u;
          const float wa[4] = {wv.x, wv.y, wv.z, wv.w}, pa4[4] = {pv.x, pv.y, pv.z, pv.w};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            if ((lm >> i) & 1u) {
              t = add_rn(t, wa[i]);
              tl = add_rn(tl, pa4[i]);
            } else {
              cu = add_rn(cu, wa[i]);
            }
          }
        }
        for (int k = nk4; k < nk; ++k) {
          const float wv = w[g * WS + k];
          if ((live_mask >> k) & 1ull) {
            t = add_rn(t, wv);
            tl = add_rn(tl, pe[g * WS + k]);
          } else {
            cu = add_rn(cu, wv);
          }
        }
        ts[g] = t;
        tlse[g] = tl;
        cut[g] = cu;
      }
    }
    // N: warp items (slice, block of 8 rows, column half); lane = C columns x 8 rows; the
    // slice's live keys in index order (decode_plan.h pv_slices).
    if (MMA) {
      const unsigned char *stg = stage + st * 64 * vrow;
      if (pf16)
        pv_mma_chunk<D, true>(ns, wop, stg, VR, nrb, live_mask, warp, lane);
      else
        pv_mma_chunk<D, false>(ns, wop, stg, VR, nrb, live_mask, warp, lane);
    } else {
      constexpr int C = pv_cols(D);
      const unsigned char *stg = stage + st * 64 * vrow;
      const float sx = exp2i(vexp);
      for_each_pv_part<D>(warp, lane, NS, nrb, G, ns, live_mask,
                          [&](float *nsl, int rb, int c0, int k0, uint32_t m) {
                            if (v8)
                              pv_item<C, kVV8>(nsl, wt, RS, rb, G, D, c0, stg,
                                               static_cast<int>(vrow), s_flags, k0, m, sx, s_e4m3);
                            else if (pf16)
                              pv_item<C, kVF16>(nsl, wt, RS, rb, G, D, c0, stg,
                                                static_cast<int>(vrow), s_flags, k0, m, sx, s_e4m3);
                            else
                              pv_item<C, kVBf16>(nsl, wt, RS, rb, G, D, c0, stg,
                                                 static_cast<int>(vrow), s_flags, k0, m, sx,
                                                 s_e4m3);
                          });
    }
    if (more) {
#pragma unroll
      for (int i = 0; i < NP; ++i) {
        ka[i] = ka_n[i];
        kb[i] = kb_n[i];
      }
    }
    __syncthreads();
  }
  if (page_has_cut) {
    for (int g = tid; g < G; g += blockDim.x) page_cut[n_pages * G + g] = cut[g];
    if (tid == 0) s_page_last[n_pages] = s1 - 1;
    n_pages += 1;
  }
  __syncthreads();
  // The split's partial: N + sum over its cut pages (in order) of mass x the page's mean V.
  for (int e = tid; e < G * D; e += blockDim.x) {
    const int g = e / D, d = e % D;
    float cn = 0.0f;
    for (int i = 0; i < n_pages; ++i) {
      const int32_t last = s_page_last[i];
      const int32_t count = min(P, L - (last - last % P));
      const float mean =
          div_rn(c.v_page_sum[page_sum_base(c, b, hk, last) + d], static_cast<float>(count));
      cn = add_rn(cn, mul_rn(page_cut[i * G + g], mean));
    }
    float nsum = 0.0f;  // N's slices in order
    if (MMA)
      for (int sl = 0; sl < pv_kparts(D); ++sl) nsum = add_rn(nsum, ns[(sl * D + d) * RS + g]);
    else
      for (int sl = 0; sl < NS; ++sl) nsum = add_rn(nsum, ns[sl * G * D + e]);
    ws.part_n[((row0 + g) * ws.splits + s) * D + d] = add_rn(nsum, cn);
  }
  for (int g = tid; g < G; g += blockDim.x) {
    float ct = 0.0f;
    for (int i = 0; i < n_pages; ++i) ct = add_rn(ct, page_cut[i * G + g]);
    ws.part_t[(row0 + g) * ws.splits + s] = add_rn(ts[g], ct);
    ws.part_tl[(row0 + g) * ws.splits + s] = add_rn(tlse[g], ct);
  }
  if (tid == 0) {
    const int64_t vbytes = v8 ? D : 2 * D;
    int64_t n[4] = {0, 0, 0, 0};  // keys, live, refined, v-refined
    for (int w = 0; w < kThreads / 32; ++w)
      for (int i = 0; i < 4; ++i) n[i] += (s_wcount[w] >> (8 * i)) & 0xffu;
    const int64_t bytes = n[0] * (D + 2) + n[1] * vbytes + n[2] * D + n[3] * D +
                          static_cast<int64_t>(n_pages) * 4 * D;
    add_split_stats(c, ws, stats, pass, b, hk, n[0], n[1], n[2], n[3], bytes);
  }
}

// Defined with the combine below. (Not templates: as templates, their shared variables moved in
// the plain instances' layout. The plain instances pass window 0, a constant that folds away.)
__device__ __forceinline__ void add_step_stats(const int32_t *lengths, const int32_t *flag,
                                               const int32_t *bad, const unsigned long long *gcnt,
                                               const int32_t *rej, int batch, int n_kv_heads, int G,
                                               int D, unsigned long long *stats, int window);
__device__ __forceinline__ void combine_pass1_if_last(const DecodeCache &c,
                                                      const fold_decode_params_t &p, const Ws &ws,
                                                      const fold_tensor_t &out, float *lse,
                                                      const int s, const int hk, const int b);
__device__ __forceinline__ void combine_pass1_if_last_ext(const DecodeCache &c,
                                                          const fold_decode_params_t &p,
                                                          const Ws &ws, const fold_tensor_t &out,
                                                          float *lse, const int s, const int hk,
                                                          const int b);
__device__ __forceinline__ void fixup_group(const DecodeCache &c, const fold_decode_params_t &p,
                                            const Ws &ws, const int hk, const int b, int window);

// grid (splits, Hkv, B): split blockIdx.x of group (blockIdx.z, blockIdx.y) (pass 0). LIST
// (pass 1): grid (K); the items are (listed group j, split s), i = j * splits + s, and block k
// runs items k, k + K, ... one after the other; the last split of a group to finish combines it.
// The grid does not depend on how many groups were flagged nor on max_len against the requests'
// lengths (a split past a request's end returns at once), and a step where none was flagged
// costs K blocks that exit at once (and no combine launch).
// (Pass 1, the guard's rare path, is held to one block per SM fewer: with its combine and
// statistics the split's loop spilled.)
// EXT: a step with a sliding window or sinks (launch_decode chooses it from the call's arguments:
// window_before in (0, max_len), or sinks != NULL). The splits, the fix-up and the counters honour
// p.window_before (split_item's WIN), and the combine (pass 1's, LIST) p.window_before and p.sinks;
// with neither (a window that hides nothing) the same bits as the plain instance.
template <int NP, bool MMA, bool LIST, bool EXT = false>
__global__ void __launch_bounds__(kThreads, (NP == 4 ? 2 : 3) - (LIST ? 1 : 0))
    decode_split_kernel(const DecodeCache c, const fold_decode_params_t p, const Ws ws,
                        const fold_tensor_t out, float *lse, const int pass, int64_t *stats,
                        const int appended) {
  pdl_wait();
  if constexpr (LIST) {
    if (stats != nullptr)
      add_step_stats(c.lengths, ws.flag, ws.bad, ws.gcnt, appended ? ws.rej : nullptr, c.batch,
                     c.n_kv_heads, p.n_heads / c.n_kv_heads, c.head_dim,
                     reinterpret_cast<unsigned long long *>(stats), EXT ? p.window_before : 0);
    // Each block takes a contiguous range of the items (group-major), so that consecutive items
    // are mostly splits of one group and the block recomputes the group's fix-up once for all of
    // them (it reads its own ws.z write after that): a fix-up per block and group, not per item
    // (the fix-up is O(flagged rows x L) with a serial sum over L keys).
    const int64_t items = static_cast<int64_t>(*ws.nflag) * ws.splits;
    // No flagged group (the common case): leave here. The trigger below sits past the inlined
    // split and combine, far away in the code: ncu found the jump there a cold instruction fetch
    // (19% of pass 1's samples at B1, and the 64-bit division of `per` 8% more; notes/decode.md
    // section 62). A block's exit counts as its trigger.
    if (items == 0) return;
    const int64_t per = (items + gridDim.x - 1) / gridDim.x;
    const int64_t i1 = min(items, (static_cast<int64_t>(blockIdx.x) + 1) * per);
    int32_t fixed = -1;  // the group whose fix-up this block has done
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * per; i < i1; ++i) {
      const int32_t grp = ws.flist[i / ws.splits];
      const int s = static_cast<int>(i % ws.splits);
      const int hk = grp % c.n_kv_heads, b = grp / c.n_kv_heads;
      __syncthreads();  // the previous item's reads of the shared memory are done
      // (EXT: the splits before a window's too, which then return at once: whichever block
      // combines the group has computed its Z itself, as without a window.)
      if (s * kSplitKeys < c.lengths[b] && grp != fixed) {  // (uniform)
        fixup_group(c, p, ws, hk, b, EXT ? p.window_before : 0);
        fixed = grp;
      }
      split_item<NP, MMA, EXT>(c, p, ws, pass, stats, s, hk, b);
      // (Every split s < the group's count comes here, those before a window included, so the
      // last-block count reaches its total.)
      if constexpr (EXT)
        combine_pass1_if_last_ext(c, p, ws, out, lse, s, hk, b);
      else
        combine_pass1_if_last(c, p, ws, out, lse, s, hk, b);
    }
  } else {
    // EXT with a window: the grid covers the splits a window can touch (launch_decode), counted
    // from the split of the request's first window key (the splits before it add nothing).
    int s = static_cast<int>(blockIdx.x);
    if constexpr (EXT)
      if (p.window_before > 0)
        s += window_first(c.lengths[blockIdx.z], p.window_before) / kSplitKeys;
    split_item<NP, MMA, EXT>(c, p, ws, pass, stats, s, blockIdx.y, blockIdx.z);
  }
  pdl_trigger();
}

// The q planes of rows row0 .. row0 + G - 1 as the int8 MMA's A fragments, [row block of 8][slice
// s < 2 NP][lane] (uint4 = a0..a3), zero for rows >= G, written by the consumer threads of the
// ring kernels (decode_split_kernel keeps its own copy of this loop: moved into this function,
// its stride blockDim.x made ptxas schedule that kernel differently). Lane (g, t) of slice
// s = 2 i + h feeds the key bytes at 16 (t + 4 i) + 8 h (b0) and + 4 (b1); its A registers hold
// the q bytes at the same offsets, of row 8 rb + g (plane A as row g, plane B as g + 8).
template <int NP>
__device__ __forceinline__ void load_q_fragments(uint4 *qfrag, const Ws &ws, int64_t row0, int G,
                                                 int nrb, int tid) {
  constexpr int D = 64 * NP;
  for (int e = tid; e < nrb * 2 * NP * 32; e += kThreads) {
    const int ln = e % 32, sl = (e / 32) % (2 * NP), rb = e / (32 * 2 * NP);
    const int r = 8 * rb + (ln >> 2);
    const int o = 16 * ((ln & 3) + 4 * (sl >> 1)) + 8 * (sl & 1);
    uint4 a = make_uint4(0u, 0u, 0u, 0u);
    if (r < G) {
      const uint32_t *qa32 = reinterpret_cast<const uint32_t *>(ws.qa + (row0 + r) * D + o);
      const uint32_t *qb32 = reinterpret_cast<const uint32_t *>(ws.qb + (row0 + r) * D + o);
      a = make_uint4(qa32[0], qb32[0], qa32[1], qb32[1]);
    }
    qfrag[e] = a;
  }
}
