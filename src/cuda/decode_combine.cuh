// The combine of a group's split partials, the guard (pass 0's flags, pass 1's fix-up of the
// flagged rows' Z, the last-block combine of pass 1) and the step's read statistics.
// Included by decode.cu inside its anonymous namespace, after decode_screen.cuh.

// Block zb of group (b, hk)'s combine, thread per (row, column) of the group: each block sums its
// whole rows' T and T_lse (splits in order) and its elements' N over the splits in order, and
// writes o. Guard: rows outside the window
// or with a non-finite N are OR-ed into ws.bad / ws.flag (cleared by the front); a flagged
// group's o and LSE are overwritten by pass 1, so pass 0 writes o whatever the flag. The
// pass-0 read statistics are added by add_step_stats (pass 1's kernel: it sees the final flags).
constexpr int kCombineBatch = 64;  // at most this many splits staged in shared memory at a time
// Splits staged at a time for a workspace of S splits per row, and the shared memory that takes:
// sized by S, not by kCombineBatch, so that short caches keep several blocks per SM (64 KB for
// every block held three per SM; the batch changes no sum's order, so no bit).
__host__ __device__ constexpr int combine_batch(int S) {
  return S < kCombineBatch ? (S < 1 ? 1 : S) : kCombineBatch;
}
// The combine's batch: 32 splits where its grid would exceed the three blocks per SM that 64
// splits (64 KB) allow, so that it stays one wave (B32 L32K H 32/2: 512 blocks; graphed attend
// -0.8 to -1.0%), else combine_batch(S) (at B1 L32K 32 would cost +2.2 to +2.7%: each block then
// waits two memory latencies; session 33). FOLD_DECODE_COMBINE_BATCH = 8 / 16 / 32 / 64 sets the
// cap instead (A/B runs; read per call). No bit depends on the batch.
inline size_t combine_smem_bytes(int S, int64_t grid_blocks, int ept = 1) {
  int cap = grid_blocks > 3 * static_cast<int64_t>(sm_count()) ? 32 : kCombineBatch;
  if (const char *v = std::getenv("FOLD_DECODE_COMBINE_BATCH")) {
    const int x = std::atoi(v);
    if (x == 8 || x == 16 || x == 32 || x == 64) cap = x;
  }
  return static_cast<size_t>(std::min(combine_batch(S), cap)) * kThreads * 4 * ept;
}

// EPT elements per thread (1, or 2 where the grid of one would take more than one wave: the
// block's chain of loads is what a combine block costs, so half the blocks are half the waves).
// EXT (a step with a sliding window or sinks, decode_step.cpp): the sums start at the window's
// first split (the splits before it wrote nothing; their partials would be zeros), and with sinks
// (p.sinks, device memory) each row's keys' LSE lse_keys = Z + log2 T_lse becomes
// lse = log2(2^lse_keys + 2^(sink log2 e)) (log2_add_exp2) and its output N / T is scaled by
// r = 2^(lse_keys - lse), as finish() does; a -inf sink gives r = 1 and the bits of no sink.
template <int EPT = 1, bool EXT = false>
__device__ __forceinline__ void combine_item(const DecodeCache &c, const fold_decode_params_t &p,
                                             const Ws &ws, const fold_tensor_t &out, float *lse,
                                             const int pass, const int hk, const int b,
                                             const int zb) {
  constexpr int BE = EPT * kThreads;  // elements per block
  constexpr int kRows = BE / 64;      // rows per block at most (D >= 64)
  extern __shared__ __align__(16) unsigned char combine_smem[];
  float *sn = reinterpret_cast<float *>(combine_smem);  // [batch][BE]: N partials
  __shared__ float s_pt[kRows][kCombineBatch], s_ptl[kRows][kCombineBatch];  // T, T_lse partials
  __shared__ float s_t[kRows], s_tl[kRows];
  const int D = c.head_dim, H = p.n_heads, G = H / c.n_kv_heads, tid = threadIdx.x;
  const int32_t L = c.lengths[b];
  const int64_t grp = static_cast<int64_t>(b) * c.n_kv_heads + hk;
  const int64_t row0 = static_cast<int64_t>(b) * H + hk * G;
  uint16_t *o = static_cast<uint16_t *>(out.data);
  // This block's elements e = (row, column) = (e / D, e % D) for e in [e0, e0 + BE), thread tid's
  // e0 + tid + j kThreads (j < EPT): whole rows g0 .. g0 + nrows - 1 (D divides kThreads), at most
  // kRows.
  const int e0 = zb * BE;
  const int g0 = e0 / D, nrows = min(BE / D, G - g0);
  if (pass == 0) {
    if (L <= 0) {
#pragma unroll
      for (int j = 0; j < EPT; ++j) {
        const int e = e0 + tid + j * kThreads;
        if (e < G * D) o[b * out.batch_stride + (hk * G + e / D) * out.head_stride + e % D] = 0;
      }
      if (lse != nullptr && tid < nrows) lse[row0 + g0 + tid] = __uint_as_float(0xff800000u);
      return;
    }
  } else if (L <= 0 || ws.flag[grp] == 0) {
    return;
  }
  const int S = ws.splits, nsplit = (L + kSplitKeys - 1) / kSplitKeys;
  // The splits staged at a time: what the launch's dynamic shared memory holds (the host sizes it:
  // combine_smem_bytes), at most combine_batch(S). The batch changes no sum's order, so no bit.
  uint32_t dyn_bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn_bytes));
  const int batch = min(combine_batch(S), static_cast<int>(dyn_bytes / (BE * 4)));
  const bool pf16 = c.dtype == FOLD_DTYPE_F16 && !c.v8;
  // Every sum runs over the splits in split order, one thread per sum (the reference's order).
  // The partials of a batch of splits are first staged in shared memory, all copies in
  // flight at once (cp.async 16-byte pieces for N, a coalesced load per thread for T / T_lse),
  // so a sum waits one memory latency per batch instead of one per few splits.
  float n[EPT], t = 0.0f, tl = 0.0f;
#pragma unroll
  for (int j = 0; j < EPT; ++j) n[j] = 0.0f;
  const int pieces = nrows * D / 4;  // 16-byte pieces of one split's N rows
  // (EXT: from the window's first split.)
  const int s_first = EXT ? window_first(L, p.window_before) / kSplitKeys : 0;
  for (int sb = s_first; sb < nsplit; sb += batch) {
    const int ns = min(batch, nsplit - sb);
    for (int i = tid; i < ns * pieces; i += kThreads) {
      const int si = i / pieces, pc = i % pieces;
      const int ge = 4 * pc;  // element offset inside the block's rows
      const float *src = ws.part_n + ((row0 + g0 + ge / D) * S + sb + si) * D + ge % D;
      cp_async16(sn + si * BE + ge, src);
    }
    cp_async_commit();
    for (int i = tid; i < ns * nrows; i += kThreads) {
      const int r = i / ns, si = i % ns;
      // From L2 (as the cp.async.cg above): in pass 1 the partials were written by other
      // blocks of the same kernel (decode_split_kernel's last-block combine).
      s_pt[r][si] = __ldcg(ws.part_t + (row0 + g0 + r) * S + sb + si);
      s_ptl[r][si] = __ldcg(ws.part_tl + (row0 + g0 + r) * S + sb + si);
    }
    cp_async_wait<0>();
    __syncthreads();
#pragma unroll
    for (int j = 0; j < EPT; ++j)
      if (e0 + tid + j * kThreads < G * D)
        for (int si = 0; si < ns; ++si) n[j] = add_rn(n[j], sn[si * BE + tid + j * kThreads]);
    if (tid < nrows)
      for (int si = 0; si < ns; ++si) {
        t = add_rn(t, s_pt[tid][si]);
        tl = add_rn(tl, s_ptl[tid][si]);
      }
    __syncthreads();
  }
  if (tid < nrows) {
    const int g = g0 + tid;
    s_t[tid] = t;
    s_tl[tid] = tl;
    if (pass == 0 &&
        !(t >= exp2i(kGuardLoLog2) && t <= exp2i(pf16 ? kGuardHiLog2F16 : kGuardHiLog2Bf16))) {
      atomicOr(&ws.bad[row0 + g], 1);
      flag_group(ws, grp);
    }
    if constexpr (EXT) {
      // finish(): the keys' LSE, then the sink's mass (the row's Z, cuts and guard ignore it).
      const bool ok = t > 0.0f && isfinite(t);
      float lse2 = add_rn(ws.z[row0 + g], log2_fp(tl)), r = 1.0f;
      if (p.sinks != nullptr && ok) {
        const float lse_keys = lse2;
        lse2 = log2_add_exp2(lse_keys, mul_rn(p.sinks[hk * G + g], kLog2eF));
        r = exp2_fp(sub_rn(lse_keys, lse2));
      }
      // (In the staging arrays, free after the sums' last barrier: no shared memory of its own,
      // so that the plain instances keep their layout.)
      s_pt[tid][0] = r;
      s_ptl[tid][0] = lse2;
    }
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < EPT; ++j) {
    const int e = e0 + tid + j * kThreads;
    if (e < G * D) {
      const int g = e / D, d = e % D;
      if (pass == 0 && !isfinite(n[j])) {
        atomicOr(&ws.bad[row0 + g], 1);
        flag_group(ws, grp);
      }
      const float tg = s_t[g - g0];
      const bool ok = tg > 0.0f && isfinite(tg);
      float r = ok ? div_rn(n[j], tg) : 0.0f;
      if constexpr (EXT)
        if (p.sinks != nullptr) r = mul_rn(r, s_pt[g - g0][0]);
      r = isfinite(r) ? r : 0.0f;
      o[b * out.batch_stride + (hk * G + g) * out.head_stride + d] = store_bits(c.dtype, r);
    }
  }
  if (lse != nullptr && tid < nrows) {
    const int g = g0 + tid;
    const float tg = s_t[tid];
    const bool ok = tg > 0.0f && isfinite(tg);
    if constexpr (EXT)
      lse[row0 + g] = ok ? mul_rn(kLn2F, s_ptl[tid][0]) : __uint_as_float(0xff800000u);
    else
      lse[row0 + g] = ok ? mul_rn(kLn2F, add_rn(ws.z[row0 + g], log2_fp(s_tl[tid])))
                         : __uint_as_float(0xff800000u);
  }
}

// ---- guard fix-up: Z = the exact LSE over the fine logits, for flagged rows -------------

// Z of the flagged rows of group (b, hk), recomputed (pass 1, by every split block of the group
// before its split: each computes the same bits, writes them to ws.z and then reads its own
// write, so no block waits for another; the guard's rare path pays the repeated work instead of
// a launch on every step). With a window (window = window_before, EXT instances; else 0): over
// the window's keys [F, L) (decode_step.cpp's exact_lse).
__device__ __forceinline__ void fixup_group(const DecodeCache &c, const fold_decode_params_t &p,
                                            const Ws &ws, const int hk, const int b, int window) {
  __shared__ __align__(16) int8_t qa[256];
  __shared__ __align__(16) int8_t qb[256];
  __shared__ float buf[kThreads];
  __shared__ float red[kThreads / 32];
  const int32_t L = c.lengths[b];
  const int32_t F = window_first(L, window);
  const int D = c.head_dim, H = p.n_heads, G = H / c.n_kv_heads, tid = threadIdx.x;
  const int64_t row0 = static_cast<int64_t>(b) * H + hk * G;
  const int log2d = log2_pow2(D);
  for (int g = 0; g < G; ++g) {
    if (__ldcg(ws.bad + row0 + g) == 0) continue;  // uniform
    if (tid < D) {
      qa[tid] = ws.qa[(row0 + g) * D + tid];
      qb[tid] = ws.qb[(row0 + g) * D + tid];
    }
    __syncthreads();
    const float sq = ws.sq[row0 + g];
    // The fine logit (both key planes), as the CPU reference's exact_lse: the row's heaviest
    // key then weighs 2^0 whatever the coarse error (notes/decode.md section 40).
    auto logit = [&](int32_t j) {
      const int64_t kr = key_row(c, b, hk, j);
      int32_t aa, ba, ab, bb;
      dot2_i8(qa, qb, c.k_a + kr * D, D, aa, ba);
      dot2_i8(qa, qb, c.k_b + kr * D, D, ab, bb);
      return fine_logit(aa, ba, ab, bb,
                        logit_multiplier(sq, bf16_bits_to_float(c.k_scale[kr]), 16 + log2d));
    };
    float m = __uint_as_float(0xff800000u);
    for (int32_t j = F + tid; j < L; j += blockDim.x) {
      const float sa = logit(j);
      m = sa > m ? sa : m;
    }
    for (int o = 16; o >= 1; o /= 2) {
      const float other = __shfl_xor_sync(0xffffffffu, m, o);
      m = other > m ? other : m;
    }
    if ((tid & 31) == 0) red[tid >> 5] = m;
    __syncthreads();
    m = red[0];
    for (int i = 1; i < kThreads / 32; ++i) m = red[i] > m ? red[i] : m;
    float sum = 0.0f;  // thread 0's, in key order
    for (int32_t j0 = F; j0 < L; j0 += kThreads) {
      const int32_t j = j0 + tid;
      if (j < L) buf[tid] = exp2_fp(sub_rn(logit(j), m));
      __syncthreads();
      if (tid == 0)
        for (int i = 0; i < kThreads && j0 + i < L; ++i) sum = add_rn(sum, buf[i]);
      __syncthreads();
    }
    if (tid == 0) ws.z[row0 + g] = add_rn(m, log2_fp(sum));
    __syncthreads();
  }
}

// grid (Hkv, B, ceil(G D / 256)): pass 0's combine (the guard's flags; pass 1 does the fix-up).
// EXT: a step with a window or sinks (combine_item).
template <bool EXT = false>
__global__ void __launch_bounds__(kThreads)
    decode_combine_kernel(const DecodeCache c, const fold_decode_params_t p, const Ws ws,
                          const fold_tensor_t out, float *lse) {
  pdl_wait();
  combine_item<1, EXT>(c, p, ws, out, lse, 0, blockIdx.x, blockIdx.y, blockIdx.z);
  pdl_trigger();
}

// The same at two elements per thread, eight blocks per SM (32 registers; unbounded, ptxas took
// 40: six blocks per SM).
template <bool EXT = false>
__global__ void __launch_bounds__(kThreads, 8)
    decode_combine2_kernel(const DecodeCache c, const fold_decode_params_t p, const Ws ws,
                           const fold_tensor_t out, float *lse) {
  pdl_wait();
  combine_item<2, EXT>(c, p, ws, out, lse, 0, blockIdx.x, blockIdx.y, blockIdx.z);
  pdl_trigger();
}

// The step's read statistics, once the guard's flags are final (pass 1's kernel, every block):
// each group's pass-0 counters (or, for a flagged group, its fix-up's rows and bytes; pass 1 adds
// its own reads), a thread per group, summed over the block, then one atomic per counter and
// block. Every load of a group is issued before any is used (one memory latency at batch 1,
// where this is the step's last work). With a window (window = window_before, EXT instances; else
// 0): a flagged group's fix-up read the window's keys [F, L) only.
__device__ __forceinline__ void add_step_stats(const int32_t *lengths, const int32_t *flag,
                                               const int32_t *bad, const unsigned long long *gcnt,
                                               const int32_t *rej, int batch, int n_kv_heads, int G,
                                               int D, unsigned long long *stats, int window) {
  __shared__ unsigned long long s_sum[kThreads / 32][8];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t groups = static_cast<int64_t>(batch) * n_kv_heads;
  if (static_cast<int64_t>(blockIdx.x) * kThreads >= groups) return;  // (uniform) no group here
  // Indexed by Stat, and [7] = FOLD_DECODE_STAT_REJECTED (the append marked rejected tokens in
  // `rej`, NULL without an append; counted once per request, by its KV head 0).
  unsigned long long v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t grp = static_cast<int64_t>(blockIdx.x) * kThreads + tid; grp < groups;
       grp += static_cast<int64_t>(gridDim.x) * kThreads) {
    // The request in 32 bits (batch x n_kv_heads is an int: the launch grids' (Hkv, B)): a 64-bit
    // division was a call to a subroutine far away in pass 1's code, a cold instruction fetch on
    // the B1 step's path (ncu, notes/decode.md section 62).
    const int gi = static_cast<int>(grp), req = gi / n_kv_heads;
    const int32_t L = lengths[req];
    const int32_t fl = flag[grp];
    if (rej != nullptr && gi == req * n_kv_heads) v[7] += rej[req] != 0;
    // A keyless group's read counters were not reset by the front: not read.
    if (L <= 0) continue;
    unsigned long long gc[5];
#pragma unroll
    for (int i = 0; i < 5; ++i) gc[i] = gcnt[grp * 5 + i];
    v[kRows] += G;
    if (fl != 0) {
      for (int g = 0; g < G; ++g) v[kFixupRows] += bad[grp * G + g] != 0;  // rows b H + hk G + g
      const int32_t F = window_first(L, window);
      v[kBytes] += gc[4] + static_cast<unsigned long long>(L - F) * (2 * D + 2);
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) v[i] += gc[i];  // kKeys .. kVRefine
      v[kBytes] += gc[4];
    }
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    for (int o = 16; o >= 1; o /= 2) v[i] += __shfl_xor_sync(0xffffffffu, v[i], o);
    if (lane == 0) s_sum[warp][i] = v[i];
  }
  __syncthreads();
  if (tid < 8) {
    unsigned long long t = 0;
    for (int w = 0; w < kThreads / 32; ++w) t += s_sum[w][tid];
    if (t != 0) atomicAdd(stats + tid, t);
  }
}

// The last-block pattern: every thread of the block has written its part (partials, flags);
// each fences, the block counts itself once on `count`, and the block that brings it to `total`
// returns true (after a fence, so that it sees every other block's writes).
__device__ __forceinline__ bool last_block_of(int32_t *count, int total) {
  __shared__ int s_last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) s_last = atomicAdd(count, 1) == total - 1 ? 1 : 0;
  __syncthreads();
  const bool last = s_last != 0;
  if (last) __threadfence();
  return last;
}

// Pass 1 after split s of the flagged group (b, hk) (decode_split_kernel's list mode): the last
// of the group's splits to finish combines the group, block after block of the pass-0 combine's
// grid (the same sums in the same order). The guard's rare path: one block does it serially.
__device__ __forceinline__ void combine_pass1_if_last(const DecodeCache &c,
                                                      const fold_decode_params_t &p, const Ws &ws,
                                                      const fold_tensor_t &out, float *lse,
                                                      const int s, const int hk, const int b) {
  const int32_t L = c.lengths[b];
  const int nsplit = (L + kSplitKeys - 1) / kSplitKeys;
  if (s >= nsplit) return;  // this split did not run (uniform)
  if (!last_block_of(ws.p1done + static_cast<int64_t>(b) * c.n_kv_heads + hk, nsplit)) return;
  const int G = p.n_heads / c.n_kv_heads;
  const int nzb = (G * c.head_dim + kThreads - 1) / kThreads;
  for (int zb = 0; zb < nzb; ++zb) {
    combine_item(c, p, ws, out, lse, 1, hk, b, zb);
    __syncthreads();  // the next block's staging reuses the shared memory
  }
}
// The same for a step with a window or sinks (decode_split_kernel's EXT): combine_item's EXT.
__device__ __forceinline__ void combine_pass1_if_last_ext(const DecodeCache &c,
                                                          const fold_decode_params_t &p,
                                                          const Ws &ws, const fold_tensor_t &out,
                                                          float *lse, const int s, const int hk,
                                                          const int b) {
  const int32_t L = c.lengths[b];
  const int nsplit = (L + kSplitKeys - 1) / kSplitKeys;
  if (s >= nsplit) return;  // this split did not run (uniform); those before a window did
  if (!last_block_of(ws.p1done + static_cast<int64_t>(b) * c.n_kv_heads + hk, nsplit)) return;
  const int G = p.n_heads / c.n_kv_heads;
  const int nzb = (G * c.head_dim + kThreads - 1) / kThreads;
  for (int zb = 0; zb < nzb; ++zb) {
    combine_item<1, true>(c, p, ws, out, lse, 1, hk, b, zb);
    __syncthreads();  // the next block's staging reuses the shared memory
  }
}
