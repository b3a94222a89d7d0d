// The screened split through a ring, software-pipelined by one chunk (opt-in).
//
// The screened split (depth set) of bf16 / fp16 caches at D 64 / 128, opt-in
// (FOLD_DECODE_SCREEN_RING=1; else decode_split_kernel runs: see split_screen_supported). A
// producer warp streams each chunk's plane A rows and scales (TMA boxes) into a ring of
// kScreenStages stages. The consumers, at step i:
// screen chunk i (coarse logits on the int8 tensor cores, verdicts OR-ed over the group) and
// start its gathers (V rows of live keys, plane B rows of refined keys: cp.async into one of two
// buffers); then finish chunk i - 1, whose gathers have had chunk i's screen to land: its weights
// (the reference's bits, as decode_split_kernel), its row sums (a fixed tree per warp, then the
// warps in order, into the row's running sums and page cut masses as decode_split_kernel keeps
// them) and its value product on the tensor cores (pv_mma_chunk). The same values as
// decode_split_kernel's MMA path up to the fp32 order of T, T_lse and the cut masses.
// Included by decode.cu inside its anonymous namespace, after decode_ring.cuh.
constexpr int kScreenStages = 3;

__host__ __device__ inline size_t screen_stage_bytes(int D) {
  return static_cast<size_t>(64) * D + 128;  // plane A rows, the 64 scales
}

__host__ __device__ inline size_t split_screen_smem_bytes(int G, int D) {
  const size_t nrb = static_cast<size_t>(G + 7) / 8, RS = 8 * nrb;
  return 1024 + kScreenStages * screen_stage_bytes(D)      // the ring, 1024-aligned
         + 2u * 64 * pv_vrow(D, true)                      // V rows, two buffers
         + 2u * 64 * D                                     // plane B rows, two buffers
         + static_cast<size_t>(pv_kparts(D)) * RS * D * 4  // N's slices
         + 2u * RS * kWS * 4                               // coarse logits, two buffers
         + RS * kWRow * 2                                  // operand weights
         + nrb * 8 * 2 * D                                 // q planes (MMA A)
         + 3u * 8 * RS * 4                                 // per-warp T, T_lse, cut
         + (8u + kPagesPerSplit) * G * 4;                  // per-row values, page cuts
}

// Opt-in (FOLD_DECODE_SCREEN_RING=1): on the H200 it is 13-15% faster than decode_split_kernel at
// batch 1 but 3-7% slower at batch 32-128 (notes/decode.md section 15). One kernel serves every
// batch size: choosing by the grid would make a request's bits depend on its batch (the two
// kernels sum T in different orders).
inline bool split_screen_supported(const DecodeCache &c, const fold_decode_params_t &p) {
  const char *v = std::getenv("FOLD_DECODE_SCREEN_RING");
  return p.dense == 0 && c.v8 == 0 && (c.head_dim == 64 || c.head_dim == 128) && v != nullptr &&
         std::strcmp(v, "1") == 0;
}

template <int NP, bool F16>
__global__ void __launch_bounds__(kRingThreads, 2)
    decode_split_screen_kernel(const __grid_constant__ CUtensorMap amap,
                               const __grid_constant__ CUtensorMap smap, const DecodeCache c,
                               const fold_decode_params_t p, const Ws ws, const int pass,
                               int64_t *stats) {
  pdl_wait();
  using namespace hopper;
  constexpr int D = 64 * NP;
  constexpr int WS = kWS;
  constexpr int VR = pv_vrow(D, true);
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // TMA destinations need 128-byte alignment: pad computed on the shared address.
  const uint32_t raw_addr = smem_u32(smem_raw);
  unsigned char *smem = smem_raw + (((raw_addr + 1023u) & ~1023u) - raw_addr);
  __shared__ __align__(8) uint64_t full[kScreenStages], empty[kScreenStages];
  __shared__ int64_t s_rowbase[kSplitKeys / kChunk];
  __shared__ __align__(8) unsigned char s_live8[2][8], s_cut8[2][8];
  __shared__ int32_t s_page_last[kPagesPerSplit];
  __shared__ int s_keys, s_live, s_ref;
  const int s = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
  const int32_t L = c.lengths[b];
  const int32_t s0 = s * kSplitKeys;
  if (s0 >= L) return;
  if (pass == 1 && ws.flag[static_cast<int64_t>(b) * c.n_kv_heads + hk] == 0) return;
  const int32_t s1 = min(L, s0 + kSplitKeys);
  const int H = p.n_heads, G = H / c.n_kv_heads, P = c.page_size;
  const int log2d = log2_pow2(D), tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int kq = (tid & (kThreads - 1)) >> 2, u = tid & 3;  // screen layout (consumers)
  const int nrb = (G + 7) / 8, RS = 8 * nrb;
  const size_t SB = screen_stage_bytes(D);
  unsigned char *ring = smem;
  unsigned char *vst = ring + kScreenStages * SB;  // [2][64][VR]
  unsigned char *bst = vst + 2 * 64 * VR;          // [2][64][D]
  float *ns = reinterpret_cast<float *>(bst + 2 * 64 * D);
  float *wc = ns + pv_kparts(D) * RS * D;  // [2][RS][WS]: coarse logits
  uint16_t *wop = reinterpret_cast<uint16_t *>(wc + 2 * RS * WS);
  uint4 *qfrag = reinterpret_cast<uint4 *>(wop + RS * kWRow);
  float *tw = reinterpret_cast<float *>(qfrag + nrb * 2 * NP * 32);  // [3][8][RS]: T, T_lse, cut
  float *f = tw + 3 * 8 * RS;
  float *sq = f, *zr = f + G, *thr_live = f + 2 * G, *thr_ref = f + 3 * G;
  float *ts = f + 5 * G, *tlse = f + 6 * G, *cut = f + 7 * G, *page_cut = f + 8 * G;
  const int64_t row0 = static_cast<int64_t>(b) * H + hk * G;
  const int nchunks = (s1 - s0 + kChunk - 1) / kChunk;

  if (tid < nchunks) s_rowbase[tid] = key_row(c, b, hk, s0 + tid * kChunk);
  if (tid == kThreads) {
    tma_prefetch_descriptor(&amap);
    tma_prefetch_descriptor(&smap);
  }
  if (tid == 0) {
    for (int st = 0; st < kScreenStages; ++st) {
      mbar_init(&full[st], 1);
      mbar_init(&empty[st], kThreads / 32);  // one arrival per consumer warp
    }
    fence_barrier_init();
    s_keys = s_live = s_ref = 0;
  }
  float e_max = 0.0f;  // the coarse-error rule (planes.h, coarse_untrusted), consumers only
  if (tid < kThreads) {
    load_q_fragments<NP>(qfrag, ws, row0, G, nrb, tid);
    for (int g = tid; g < G; g += kThreads) {
      const float z = ws.z[row0 + g];
      sq[g] = ws.sq[row0 + g];
      zr[g] = z;
      thr_live[g] = sub_rn(z, p.depth);
      thr_ref[g] = sub_rn(z, p.refine_band);
      ts[g] = 0.0f;
      tlse[g] = 0.0f;
      cut[g] = 0.0f;
    }
    e_max = group_e_max(ws, row0, G);
    for (int e = tid; e < pv_kparts(D) * RS * D; e += kThreads) ns[e] = 0.0f;
    for (int e = tid; e < RS * kWRow / 2; e += kThreads) reinterpret_cast<uint32_t *>(wop)[e] = 0u;
  }
  __syncthreads();

  if (warp == kThreads / 32) {  // the producer warp: one lane issues every copy
    if (lane == 0) {
      for (int ci = 0; ci < nchunks; ++ci) {
        const int st = ci % kScreenStages;
        const uint32_t round = static_cast<uint32_t>(ci / kScreenStages);
        if (ci >= kScreenStages) producer_wait(&empty[st], (round - 1u) & 1u);
        const int64_t r = s_rowbase[ci];
        unsigned char *dst = ring + st * SB;
        // TMA boxes of 64 rows (see decode_split_ring_kernel): plane A, the scales.
        mbar_arrive_expect_tx(&full[st], 64u * D + 128u);
        tma_load_2d(dst, &amap, &full[st], 0, static_cast<int32_t>(r));
        tma_load_2d(dst + 64 * D, &smap, &full[st], 0, static_cast<int32_t>(r / 64));
      }
    }
    return;
  }

  const int mg = lane >> 2, mt = lane & 3;
  const int g_first = kThreads - 1 - tid;  // row g's running sums: thread kThreads - 1 - g
  int held = 3;        // bit x: stage row kq of V buffer x may hold a value (or garbage)
  int vbits_prev = 0;  // the previous chunk's verdict bits (MMA layout)
  int n_pages = 0;
  bool page_has_cut = false;
  int page_pos = s0 % P;       // the finished chunk's offset in its page (no division per chunk)
  int kl = 0, kr = 0, kk = 0;  // this key thread's counts (u == 0): keys, live, refined
  for (int i = 0; i <= nchunks; ++i) {
    int vbits = 0;
    if (i < nchunks) {
      // ---- screen chunk i and start its gathers ----
      const int st = i % kScreenStages, bf = i & 1;
      const int32_t j0 = s0 + i * kChunk;
      const int nk = min(kChunk, s1 - j0);
      mbar_wait(&full[st], static_cast<uint32_t>(i / kScreenStages) & 1u);
      const unsigned char *sa = ring + st * SB;
      const uint16_t *ssc = reinterpret_cast<const uint16_t *>(sa + 64 * D);
      const bool present = kq < nk;
      int4 ka[NP];
#pragma unroll
      for (int q = 0; q < NP; ++q)
        ka[q] = present ? reinterpret_cast<const int4 *>(sa + kq * D)[u + 4 * q]
                        : make_int4(0, 0, 0, 0);
      const float skj[2] = {bf16_bits_to_float(ssc[8 * warp + 2 * mt]),
                            bf16_bits_to_float(ssc[8 * warp + 2 * mt + 1])};
      float *wcb = wc + bf * RS * WS;
      for (int rb = 0; rb < nrb; ++rb) {
        int32_t cc[4] = {0, 0, 0, 0};
        coarse_dots<NP>(qfrag, rb, lane, ka, cc);
        const int r = 8 * rb + mg;
        if (r < G) {
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const float sa_ =
                coarse_logit(cc[j], cc[2 + j], logit_multiplier(sq[r], skj[j], 8 + log2d));
            vbits |= ((sa_ >= thr_live[r] ? 1 : 0) | (sa_ >= thr_ref[r] ? 2 : 0)) << (3 * j);
            wcb[r * WS + 8 * warp + 2 * mt + j] = sa_;
          }
        }
      }
      // The coarse-error rule depends on the key only: every lane of a key may report it.
#pragma unroll
      for (int j = 0; j < 2; ++j) vbits |= coarse_untrusted(skj[j], e_max) ? 3 << (3 * j) : 0;
      vbits |= __shfl_xor_sync(0xffffffffu, vbits, 4);
      vbits |= __shfl_xor_sync(0xffffffffu, vbits, 8);
      vbits |= __shfl_xor_sync(0xffffffffu, vbits, 16);
      const int mine = __shfl_sync(0xffffffffu, vbits, lane >> 3) >> (3 * ((lane >> 2) & 1));
      const bool live = (mine & 1) != 0 && present;
      const bool refine = (mine & 2) != 0 && live;
      {
        const unsigned int bl = __ballot_sync(0xffffffffu, u == 0 && live);
        const unsigned int bc = __ballot_sync(0xffffffffu, u == 0 && present && !live);
        if (lane == 0) {
          s_live8[bf][warp] = static_cast<unsigned char>(pack_keys(bl));
          s_cut8[bf][warp] = static_cast<unsigned char>(pack_keys(bc));
        }
      }
      if (u == 0) {
        kk += present ? 1 : 0;
        kl += live ? 1 : 0;
        kr += refine ? 1 : 0;
      }
      // Gathers into buffer bf (its last reader, chunk i - 2's value product, is done).
      const int64_t r = s_rowbase[i] + kq;
      unsigned char *vdst = vst + (bf * 64 + kq) * VR;
      if (live) {
        const unsigned char *src = static_cast<const unsigned char *>(c.v) + r * 2 * D;
#pragma unroll
        for (int q = 0; q < 2 * NP; ++q)
          cp_async16(vdst + 16 * (u + 4 * q), src + 16 * (u + 4 * q));
      } else if ((held >> bf) & 1) {
#pragma unroll
        for (int q = 0; q < 2 * NP; ++q)
          *reinterpret_cast<uint4 *>(vdst + 16 * (u + 4 * q)) = make_uint4(0u, 0u, 0u, 0u);
      }
      held = live ? held | (1 << bf) : held & ~(1 << bf);
      if (refine) {
        unsigned char *bdst = bst + (bf * 64 + kq) * D;
#pragma unroll
        for (int q = 0; q < NP; ++q)
          cp_async16(bdst + 16 * (u + 4 * q), c.k_b + r * D + 16 * (u + 4 * q));
      }
      cp_async_commit();
    }
    if (i >= 1) {
      // ---- finish chunk i - 1 ----
      const int ci = i - 1, st = ci % kScreenStages, bf = ci & 1;
      const int32_t j0 = s0 + ci * kChunk;
      const int nk = min(kChunk, s1 - j0);
      if (i < nchunks)
        cp_async_wait<1>();
      else
        cp_async_wait<0>();
      named_bar_sync(1, kThreads);  // chunk ci's gathers and verdicts are visible
      const unsigned char *sa = ring + st * SB;
      const uint16_t *ssc = reinterpret_cast<const uint16_t *>(sa + 64 * D);
      const float skj[2] = {bf16_bits_to_float(ssc[8 * warp + 2 * mt]),
                            bf16_bits_to_float(ssc[8 * warp + 2 * mt + 1])};
      const float *wcb = wc + bf * RS * WS;
      bool mlive[2], mref[2], mpres[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int bits = vbits_prev >> (3 * j);
        mpres[j] = 8 * warp + 2 * mt + j < nk;
        mlive[j] = (bits & 1) != 0 && mpres[j];
        mref[j] = (bits & 2) != 0 && mlive[j];
      }
      const bool any_refine = __any_sync(0xffffffffu, mref[0] || mref[1]);
      int4 ka[NP], kb[NP];
      if (any_refine) {
        const bool present = kq < nk;
#pragma unroll
        for (int q = 0; q < NP; ++q) {
          ka[q] = present ? reinterpret_cast<const int4 *>(sa + kq * D)[u + 4 * q]
                          : make_int4(0, 0, 0, 0);
          kb[q] = reinterpret_cast<const int4 *>(bst + (bf * 64 + kq) * D)[u + 4 * q];
        }
      }
      for (int rb = 0; rb < nrb; ++rb) {
        int32_t ca[4] = {0, 0, 0, 0}, cb[4] = {0, 0, 0, 0};
        if (any_refine) fine_dots<NP>(qfrag, rb, lane, ka, kb, ca, cb);
        const int r = 8 * rb + mg;
        float pw[2] = {0.0f, 0.0f}, pex[2] = {0.0f, 0.0f}, cw[2] = {0.0f, 0.0f};
        if (r < G) {
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            if (!mpres[j]) continue;
            const float sa_ = wcb[r * WS + 8 * warp + 2 * mt + j];
            if (mlive[j]) {
              const float ell = mref[j] ? fine_logit(ca[j], ca[2 + j], cb[j], cb[2 + j],
                                                     logit_multiplier(sq[r], skj[j], 16 + log2d))
                                        : sa_;
              pex[j] = exp2_fp(sub_rn(ell, zr[r]));
              pw[j] = round_operand(pex[j], F16);
            } else {
              cw[j] = exp2_fp(sub_rn(sa_, zr[r]));
            }
          }
          reinterpret_cast<uint32_t *>(wop + r * kWRow)[4 * warp + mt] =
              pack_operands<F16>(pw[0], pw[1]);
        }
        // This warp's row sums over its 8 keys (a fixed tree).
        float t = add_rn(pw[0], pw[1]), tl = add_rn(pex[0], pex[1]), cu = add_rn(cw[0], cw[1]);
#pragma unroll
        for (int m = 1; m <= 2; m <<= 1) {
          t = add_rn(t, __shfl_xor_sync(0xffffffffu, t, m));
          tl = add_rn(tl, __shfl_xor_sync(0xffffffffu, tl, m));
          cu = add_rn(cu, __shfl_xor_sync(0xffffffffu, cu, m));
        }
        if (mt == 0 && r < G) {
          tw[warp * RS + r] = t;
          tw[(8 + warp) * RS + r] = tl;
          tw[(16 + warp) * RS + r] = cu;
        }
      }
      named_bar_sync(1, kThreads);  // weights and per-warp sums of chunk ci
      // The rows' running sums (thread g_first), page flushes as decode_split_kernel.
      const uint64_t live_mask = *reinterpret_cast<const uint64_t *>(s_live8[bf]);
      const bool chunk_cut = *reinterpret_cast<const uint64_t *>(s_cut8[bf]) != 0;
      const bool new_page = j0 > s0 && page_pos == 0;
      page_pos = page_pos + kChunk == P ? 0 : page_pos + kChunk;
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
      for (int g = g_first; g < G; g += kThreads) {
        float t = 0.0f, tl = 0.0f, cu = 0.0f;  // the chunk's: warps in order
        for (int w8 = 0; w8 < 8; ++w8) {
          t = add_rn(t, tw[w8 * RS + g]);
          tl = add_rn(tl, tw[(8 + w8) * RS + g]);
          cu = add_rn(cu, tw[(16 + w8) * RS + g]);
        }
        ts[g] = add_rn(ts[g], t);
        tlse[g] = add_rn(tlse[g], tl);
        cut[g] = add_rn(cut[g], cu);
      }
      pv_mma_chunk<D, F16>(ns, wop, vst + bf * 64 * VR, VR, nrb, live_mask, warp, lane);
      named_bar_sync(1, kThreads);  // the ring stage, the weights and per-warp sums are free
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[st]);  // one arrival per consumer warp
    }
    vbits_prev = vbits;
  }
  if (u == 0) {
    // Per-warp totals of the key threads' counts (lanes 0, 4, .., 28).
    int a = kk, l = kl, rf = kr;
#pragma unroll
    for (int m = 4; m <= 16; m <<= 1) {
      a += __shfl_xor_sync(0x11111111u, a, m);
      l += __shfl_xor_sync(0x11111111u, l, m);
      rf += __shfl_xor_sync(0x11111111u, rf, m);
    }
    if (lane == 0) {
      atomicAdd(&s_keys, a);
      atomicAdd(&s_live, l);
      atomicAdd(&s_ref, rf);
    }
  }
  if (page_has_cut) {
    for (int g = g_first; g < G; g += kThreads) page_cut[n_pages * G + g] = cut[g];
    if (tid == 0) s_page_last[n_pages] = s1 - 1;
    n_pages += 1;
  }
  named_bar_sync(1, kThreads);
  // The split's partial, as decode_split_kernel's (N's slices in order, then the cut pages).
  for (int e = tid; e < G * D; e += kThreads) {
    const int g = e / D, d = e % D;
    float cn = 0.0f;
    for (int q = 0; q < n_pages; ++q) {
      const int32_t last = s_page_last[q];
      const int32_t count = min(P, L - (last - last % P));
      const float mean =
          div_rn(c.v_page_sum[page_sum_base(c, b, hk, last) + d], static_cast<float>(count));
      cn = add_rn(cn, mul_rn(page_cut[q * G + g], mean));
    }
    float nsum = 0.0f;
    for (int sl = 0; sl < pv_kparts(D); ++sl) nsum = add_rn(nsum, ns[(sl * D + d) * RS + g]);
    ws.part_n[((row0 + g) * ws.splits + s) * D + d] = add_rn(nsum, cn);
  }
  for (int g = tid; g < G; g += kThreads) {
    float ct = 0.0f;
    for (int q = 0; q < n_pages; ++q) ct = add_rn(ct, page_cut[q * G + g]);
    ws.part_t[(row0 + g) * ws.splits + s] = add_rn(ts[g], ct);
    ws.part_tl[(row0 + g) * ws.splits + s] = add_rn(tlse[g], ct);
  }
  if (tid == 0) {
    const int64_t bytes = static_cast<int64_t>(s_keys) * (D + 2) +
                          static_cast<int64_t>(s_live) * 2 * D + static_cast<int64_t>(s_ref) * D +
                          static_cast<int64_t>(n_pages) * 4 * D;
    add_split_stats(c, ws, stats, pass, b, hk, s_keys, s_live, s_ref, 0, bytes);
  }
  pdl_trigger();
}
