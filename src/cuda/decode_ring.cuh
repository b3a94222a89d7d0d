// The dense split through a TMA ring, value product on the tensor cores.
//
// The dense split of bf16 / fp16 and v8 caches at D 64 / 128 (the default there; FOLD_DECODE_RING=0
// runs decode_split_kernel, FOLD_DECODE_V8_RING=0 for v8 caches only). A producer warp moves each
// 64-key chunk into a ring of ST stages (ring_stages) with full / empty mbarriers: the V rows by
// TMA (a 2-D map over the cache's rows, 64 x 64-value boxes with the 128-byte swizzle, so that the
// ldmatrix reads below are free of bank conflicts; per-row bulk copies into padded rows cost the
// producer ~540 instructions per chunk, ncu; v8: V's two byte planes as 64-row boxes, swizzled
// alike), plane A rows and plane B rows and the 64 scales (TMA boxes of 64 rows too). The 8
// consumer warps compute every key's weight exactly as decode_split_kernel does (integer dots on
// the tensor cores, the same fine logit, exp2 and operand rounding: the same bf16 / fp16 weight
// bits), then the value product on the tensor cores: N^T[d][g] += V^T[d][k] W^T[k][g] with
// mma.m16n8k16 (A = V^T by ldmatrix.trans of the stage rows, B = the weights of 8 rows). The
// products of two 16-bit operands are exact in fp32 (v8: the planes widened to bf16 exactly, two
// products per key: plane A and plane B / 8); only the order and rounding of the fp32 sums
// differ from the CPU reference's sequential sums, so this path matches the reference within a
// rounding bound, not bit for bit (notes/decode.md section 15). Every order is fixed by the split
// (no dependence on the batch or on placement), so a request's bits alone, in a batch and under
// replay stay equal.
// Included by decode.cu inside its anonymous namespace, after decode_split2.cuh.
constexpr int kRingThreads = kThreads + 32;  // 8 consumer warps + 1 producer warp

__host__ __device__ inline size_t ring_stage_bytes(int D) {
  // V: D / 64 swizzled panels of 64 rows x 128 bytes (1024-aligned; v8: V's planes A and B, 64
  // rows x D bytes each, the same 128 D bytes) | A (D) | B (D) per key | the 64 scales; rounded
  // up to keep the next stage's panels 1024-aligned.
  return (static_cast<size_t>(64) * 4 * D + 128 + 1023) & ~static_cast<size_t>(1023);
}

__host__ __device__ inline size_t split_ring_smem_bytes(int G, int D, int stages) {
  const size_t nrb = static_cast<size_t>(G + 7) / 8;
  return 1024 + stages * ring_stage_bytes(D)  // the ring, 1024-aligned
         + 8 * nrb * kWRow * 2                // weights, [row][key], operand bits
         + nrb * 8 * 2 * D                    // q planes (MMA A)
         + 2u * 8 * 8 * nrb * 4               // per-warp row sums T, T_lse
         + (D == 64 ? 8 * nrb * D * 4 : 0)    // D 64: the second key half's N
         + 2u * G * 4;                        // sq, z
}

// v8 caches too (their value product on the tensor cores, the planes widened to bf16 in
// registers), unless FOLD_DECODE_V8_RING=0 (read per call): then the plain split's fma path,
// which keeps the reference's orders (A/B runs).
inline bool split_ring_supported(const DecodeCache &c, const fold_decode_params_t &p) {
  return p.dense != 0 && (c.v8 == 0 || env_on("FOLD_DECODE_V8_RING")) &&
         (c.head_dim == 64 || c.head_dim == 128) && env_on("FOLD_DECODE_RING");
}

// A 1-D grid over the items (split, KV head, request), split fastest: one block per item
// (block x takes item x), or, by default, as many blocks as are resident at once, each fetching
// items from a counter until none is left (the producer streams the next item's chunks into the
// ring while the consumers finish the current one; a block's start, its barrier setup and first
// chunk's latency, is paid once per SM slot, not once per item; and faster blocks take more
// items, as the hardware's block scheduler would have). Which block takes an item changes no
// value: an item's sums are its own, in a fixed order.
// 288 threads, D = 64 NP, RBM >= the group's row blocks (a power of two: the accumulators are
// indexed at compile time).
// Three blocks per SM (ncu: the kernel waits on memory; registers are what limit the blocks, and
// without the bound ptxas takes 95) where the accumulators allow it.
// WIN (a step whose sliding window `window` = window_before can hide a key; v8 too): each
// request's items start at the split of its window's first key F = window_first(L, window) (the
// splits before it add nothing: the combine starts there too); that split's item starts at F's
// chunk, whose keys before F are absent like the keys past a split's end (never read: zero
// weights, their value rows zeroed; not counted). Instances of their own: steps without a window
// keep their machine code.
template <int NP, int RBM, bool F16, int ST, bool V8 = false, bool WIN = false>
__global__ void __launch_bounds__(kRingThreads, RBM <= 4 ? 3 : 2)
    decode_split_ring_kernel(const __grid_constant__ CUtensorMap vmap,
                             const __grid_constant__ CUtensorMap vbmap,
                             const __grid_constant__ CUtensorMap amap,
                             const __grid_constant__ CUtensorMap bmap,
                             const __grid_constant__ CUtensorMap smap, const DecodeCache c,
                             const fold_decode_params_t p, const Ws ws, const int pass,
                             int64_t *stats, const int full_path, const int32_t *lengths,
                             const int early, const int window, const int l2pf) {
  // OVERLAP (early != 0: the front triggered its dependents at its start, so this grid may run
  // beside it): before its wait the kernel reads only what the step's front does not write (the
  // requests' lengths from `lengths`: the append's new lengths when the step appends, which the
  // front only copies into the cache; the page table; the cache's rows), so the producer streams
  // its first item's first stages while the front computes Z; the consumers wait before their first
  // read of the front's output, the producer before its first use of the item counter (the front
  // resets it). Else everything waits here, as before. Scheduling only: the same sums in the same
  // order.
  if (early == 0) pdl_wait();
  using namespace hopper;
  static_assert(!V8 || !F16, "v8 weights are bf16 operands (the bf16 guard window)");
  constexpr int D = 64 * NP;
  constexpr int MT = D / 16;              // m tiles (16 columns of V each)
  constexpr int KP = 8 / MT;              // warps per m tile, each a contiguous part of the keys
  constexpr int KS = kChunk / (16 * KP);  // k steps of 16 keys per warp and chunk
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // The ring's V panels need 1024-byte alignment (the swizzle): pad computed on the shared
  // address, so that the pointer stays a shared-space one (no generic addressing).
  const uint32_t raw_addr = smem_u32(smem_raw);
  unsigned char *smem = smem_raw + (((raw_addr + 1023u) & ~1023u) - raw_addr);
  __shared__ __align__(8) uint64_t full[ST], empty[ST];
  // The consumers' current item (split, KV head, request, keys): read back after the chunk loop
  // rather than kept in registers over it (the D 64 instances sit at the register bound).
  __shared__ int s_item[4];
  // Per stage: the item whose first chunk it holds, or -1: no more items. The producer writes it
  // after its wait for the stage's empty phase and before its (release) arrival on the stage's
  // full barrier; the consumers read it after their (acquire) wait on that barrier. Both as
  // relaxed shared-memory atomics: the mbarriers order them, and racecheck (which reported the
  // plain store and loads of this exchange, session 19) does not count atomics as hazards.
  // (st.async, which would complete the stage's transaction bytes, requires a cluster of more
  // than one CTA: undefined here.)
  __shared__ int s_hdr[ST];
  const int H = p.n_heads, G = H / c.n_kv_heads;
  const int items = ws.splits * c.n_kv_heads * c.batch;  // < 2^31 (the launcher checks)
  const int log2d = log2_pow2(D), tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int kq = (tid & (kThreads - 1)) >> 2, u = tid & 3;  // screen layout (consumers)
  const int nrb = (G + 7) / 8, RS = 8 * nrb;
  const size_t SB = ring_stage_bytes(D);
  unsigned char *ring = smem;
  uint16_t *wop = reinterpret_cast<uint16_t *>(ring + ST * SB);  // [RS][kWRow]
  uint4 *qfrag = reinterpret_cast<uint4 *>(wop + RS * kWRow);
  float *tw = reinterpret_cast<float *>(qfrag + nrb * 2 * NP * 32);  // [8 warps][RS]: T
  float *tlw = tw + 8 * RS;                                          // [8 warps][RS]: T_lse
  float *nred = tlw + 8 * RS;                                        // [RS][D]: D 64's 2nd half
  float *sq = nred + (KP == 2 ? RS * D : 0), *zr = sq + G;
  // Fetching blocks (a grid smaller than the items): [batch + 1], the requests' first items in
  // the fetched numbering, which counts only items with keys (request-major, then KV head, then
  // split), so that no block spends a fetch on an empty split (the grid follows the cache's
  // capacity, not its lengths).
  int *s_first = reinterpret_cast<int *>(zr + G);
  const bool fetch = static_cast<int>(gridDim.x) < items;
  // An item's split, KV head, request and key range [s0, s1). One block per item: item x of the
  // capacity's grid (empty when s0 >= the length: pass 0 only, pass 1 runs the plain split).
  // Fetching: item x of the fetched numbering (never empty; after the block's s_first is set).
  // WIN: the item's first visible key lo (F in F's split; else s0) and s0 the chunk holding it.
  struct Item {
    int s, hk, b;
    int32_t s0, s1, lo;
  };
  const auto item_at = [&](int it) {
    Item x;
    if (fetch) {
      // The request: the last b with s_first[b] <= it (s_first[0] = 0 <= it < s_first[batch]).
      int lo = 0, hi = c.batch;
      while (hi - lo > 1) {
        const int mid = (lo + hi) >> 1;
        if (s_first[mid] <= it)
          lo = mid;
        else
          hi = mid;
      }
      const int r = it - s_first[lo];
      const int n = (s_first[lo + 1] - s_first[lo]) / c.n_kv_heads;  // the request's splits (> 0)
      x.b = lo;
      x.hk = r / n;
      x.s = r - x.hk * n;
      if (WIN) x.s += window_first(lengths[lo], window) / kSplitKeys;  // (from F's split)
    } else {
      x.s = it % ws.splits;
      const int gh = it / ws.splits;
      x.hk = gh % c.n_kv_heads;
      x.b = gh / c.n_kv_heads;
    }
    const int32_t L = lengths[x.b];
    x.s0 = x.s * kSplitKeys;
    x.s1 = min(L, x.s0 + kSplitKeys);
    x.lo = x.s0;
    if (WIN) {  // (a split wholly before F: s0 >= s1, an empty item; s1 is a multiple of 64 there)
      const int32_t F = window_first(L, window);
      x.lo = max(x.s0, F);
      x.s0 = max(x.s0, F & ~(kChunk - 1));
    }
    return x;
  };

  if (tid == 0) {
    for (int st = 0; st < ST; ++st) {
      mbar_init(&full[st], 1);
      mbar_init(&empty[st], kThreads / 32);  // one arrival per consumer warp
    }
    fence_barrier_init();
  }
  if (tid == kThreads) {
    tma_prefetch_descriptor(&vmap);
    if (V8) tma_prefetch_descriptor(&vbmap);
    tma_prefetch_descriptor(&amap);
    tma_prefetch_descriptor(&bmap);
    tma_prefetch_descriptor(&smap);
  }
  // Zeroed weights: rows >= G are never written and stay zero over the items.
  if (tid < kThreads)
    for (int e = tid; e < RS * kWRow / 2; e += kThreads) reinterpret_cast<uint32_t *>(wop)[e] = 0u;
  if (fetch) {
    // s_first: the requests' item counts (KV heads x splits with keys), loaded by every thread
    // (the lengths' loads in parallel), then scanned in place by warp 0, 32 requests per round.
    for (int b = tid; b < c.batch; b += kRingThreads) {
      const int32_t L = lengths[b];
      const int from = WIN && L > 0 ? window_first(L, window) / kSplitKeys : 0;
      s_first[b + 1] = L > 0 ? ((L + kSplitKeys - 1) / kSplitKeys - from) * c.n_kv_heads : 0;
    }
    __syncthreads();
    if (warp == 0) {
      int carry = 0;
      if (lane == 0) s_first[0] = 0;
      for (int b0 = 0; b0 < c.batch; b0 += 32) {
        const int b = b0 + lane;
        int x = b < c.batch ? s_first[b + 1] : 0;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const int y = __shfl_up_sync(0xffffffffu, x, o);
          if (lane >= o) x += y;
        }
        if (b < c.batch) s_first[b + 1] = carry + x;
        carry += __shfl_sync(0xffffffffu, x, 31);
      }
    }
  }
  __syncthreads();
  // The items to take: fetched ones (with keys), or the capacity's grid.
  const int n_items = fetch ? s_first[c.batch] : items;

  if (warp == kThreads / 32) {  // the producer warp: every chunk of the block's items, in order
    // A grid of one block per item: block x takes item x. A smaller grid: each block fetches
    // items from ws.ring_next (reset by the front) until none is left, so that the blocks that
    // go faster take more of them, and the next item's chunks stream in while the consumers
    // finish the current one.
    // Block x's first item is x; fetching blocks then take items gridDim.x, gridDim.x + 1, ...
    // from the counter (so that the first item needs no counter: OVERLAP streams it before the
    // wait).
    uint32_t gci = 0;  // chunks over the block's items: the ring's stage and round
    int it = blockIdx.x;
    bool waited = early == 0;
    while (it < n_items) {
      // The next item's fetch, issued at the item's start (its latency overlaps this item's
      // chunks), or, before the wait (OVERLAP: the first item), at its first wait for a stage.
      int next = n_items;
      bool asked = false;
      const auto ask = [&]() {
        if (fetch) {
          if (!waited) pdl_wait();
          waited = true;
          if (lane == 0) next = static_cast<int>(gridDim.x) + atomicAdd(ws.ring_next, 1);
        }
        asked = true;
      };
      if (waited) ask();
      const Item cur = item_at(it);
      if (l2pf != 0) {
        // A small grid (l2pf): every chunk of the item asked of L2 at once, lane i chunk i (an
        // item is at most kSplitKeys / kChunk chunks), so that the chunks past the ring's first
        // ST, whose loads wait for a stage to free, meet L2 instead of DRAM. Scheduling only.
        static_assert(kSplitKeys / kChunk <= 32, "a chunk per lane");
        const int32_t jp = cur.s0 + kChunk * lane;
        if (jp < cur.s1) {
          const int64_t r = key_row(c, cur.b, cur.hk, jp);
          const uint32_t nk = static_cast<uint32_t>(min(kChunk, cur.s1 - jp));
          l2_prefetch_values_b<D, V8>(c, r, nk);
          l2_prefetch(c.k_a + r * D, nk * D);
          l2_prefetch(c.k_scale + r, 2 * kChunk);  // (the scales' row of 64: the TMA box's)
        }
      }
      for (int32_t j0 = cur.s0; j0 < cur.s1; j0 += kChunk, ++gci) {
        const int st = static_cast<int>(gci % ST);
        const uint32_t round = gci / ST;
        // The page table's read before the wait: its latency overlaps the consumers' work.
        const int64_t r = key_row(c, cur.b, cur.hk, j0);
        if (gci >= ST) {
          if (!asked) ask();
          producer_wait(&empty[st], (round - 1u) & 1u);
        }
        unsigned char *dst = ring + st * SB;
        if (lane == 0) {
          // Every copy is a TMA box of 64 rows (the chunk's page rows past nk, or zeros past the
          // pool, are moved too and never read): the expected bytes do not depend on nk. Tensor
          // copies, not plain bulk copies: compute-sanitizer's racecheck orders the consumers'
          // reads of tensor copies through the full barrier but reported every read of a plain
          // bulk copy as a race (notes/decode.md section 15). An item's first chunk also carries
          // the item (4 bytes more).
          if (j0 == cur.s0) atomicExch(&s_hdr[st], it);
          mbar_arrive_expect_tx(&full[st], 256u * D + 128u);
          if (V8) {
            // v8: the 64 rows of V's plane A, then of plane B (D bytes each, swizzled: below).
            tma_load_2d(dst, &vmap, &full[st], 0, static_cast<int32_t>(r));
            tma_load_2d(dst + 64 * D, &vbmap, &full[st], 0, static_cast<int32_t>(r));
          } else {
#pragma unroll
            for (int pn = 0; pn < D / 64; ++pn)
              tma_load_2d(dst + pn * 8192, &vmap, &full[st], 64 * pn, static_cast<int32_t>(r));
          }
          tma_load_2d(dst + 128 * D, &amap, &full[st], 0, static_cast<int32_t>(r));
          tma_load_2d(dst + 192 * D, &bmap, &full[st], 0, static_cast<int32_t>(r));
          tma_load_2d(dst + 256 * D, &smap, &full[st], 0, static_cast<int32_t>(r / 64));
        }
      }
      if (!asked) ask();
      it = fetch ? __shfl_sync(0xffffffffu, next, 0) : n_items;
    }
    // The end: one more stage, without data, whose header tells the consumers so.
    const int st = static_cast<int>(gci % ST);
    if (gci >= ST) producer_wait(&empty[st], (gci / ST - 1u) & 1u);
    if (lane == 0) {
      atomicExch(&s_hdr[st], -1);
      mbar_arrive(&full[st]);
    }
    return;
  }

  const int mg = lane >> 2, mt = lane & 3;
  const int mtile = warp % MT, kpart = warp / MT;
  // ldmatrix row addresses. A = V^T of keys k0 .. k0 + 15, columns 16 mtile ..: matrix q = lane /
  // 8 holds columns + 8 (q & 1), keys + 8 (q >> 1); its row lane % 8 is one key's 8 values, the
  // 16-byte piece jd = 2 mtile + (q & 1) of the key's row: panel jd / 8, at piece (jd % 8) ^
  // (key % 8) of the panel's 128-byte row (the swizzle; key % 8 = lane % 8 as k0 % 16 = 0).
  const int jd = 2 * mtile + ((lane >> 3) & 1);
  const uint32_t a_off = static_cast<uint32_t>(
      (jd >> 3) * 8192 + ((lane >> 4) * 8 + (lane & 7)) * 128 + (((jd & 7) ^ (lane & 7)) << 4));
  // v8: the stage holds V's planes as 64 rows of D bytes each (plane A, then plane B), with the
  // 128-byte swizzle at D 128 (16-byte piece j of row k at j ^ (k % 8)) and the 64-byte one at
  // D 64 (j ^ (k / 2 % 4)). One ldmatrix.x4.trans per k step reads 8 x 8 matrices of 16-bit pairs
  // of bytes: matrix q = lane / 8 is plane q / 2, keys k0 + 8 (q & 1) .., the m tile's 16 bytes
  // (columns 16 mtile ..). Lane (g, t) then holds, per matrix, keys 2t and 2t + 1 of columns
  // 16 mtile + 2g and + 2g + 1: byte-permuted into the pair of each column, widened to bf16, they
  // are A fragments whose row g is column 16 mtile + 2g and row g + 8 column 16 mtile + 2g + 1
  // (the accumulators' rows map alike: dcol below).
  const int vkey = lane & 15;
  const uint32_t a_off8 =
      static_cast<uint32_t>(((lane >> 4) & 1) * 64 * D + vkey * D +
                            ((mtile ^ (D == 128 ? (vkey & 7) : ((vkey >> 1) & 3))) << 4));
  // The output column of accumulator element i (rows g / g + 8 of the m tile, by the layout).
  const auto dcol = [&](int i) {
    return V8 ? 16 * mtile + 2 * mg + (i >> 1) : 16 * mtile + mg + 8 * (i >> 1);
  };
  // B = the weights of rows 8 nb .. 8 nb + 7: matrices (keys k0 ..) and (keys k0 + 8 ..), row
  // addresses from lanes 0-15 (ldmatrix .x2).
  const uint32_t b_base =
      smem_u32(wop) + static_cast<uint32_t>(((lane & 7) * kWRow + 8 * ((lane >> 3) & 1)) * 2);
  pdl_wait();        // (OVERLAP) before the first read of the front's output (else done above)
  uint32_t gci = 0;  // chunks over the block's items, as the producer counts them
  for (;;) {
    // The next item, from the header of the stage that holds its first chunk (the wait is
    // repeated in the chunk loop: the phase cannot move on before this stage is released).
    mbar_wait(&full[gci % ST], (gci / ST) & 1u);
    const int it = atomicAdd(&s_hdr[gci % ST], 0);
    if (it < 0) break;  // (every consumer thread reads -1 here: the producer's last stage)
    int32_t s0, s1, lo;
    {
      const Item cur = item_at(it);  // (not empty: the producer sends only items with keys)
      s0 = cur.s0;
      s1 = cur.s1;
      lo = cur.lo;
      const int64_t row0 = static_cast<int64_t>(cur.b) * H + cur.hk * G;
      if (tid == 0) {
        s_item[0] = cur.s;
        s_item[1] = cur.hk;
        s_item[2] = cur.b;
        s_item[3] = s1 - lo;
      }
      // As decode_split_kernel: q planes as MMA A fragments, per-row values, zeroed row sums.
      load_q_fragments<NP>(qfrag, ws, row0, G, nrb, tid);
      for (int g = tid; g < G; g += kThreads) {
        sq[g] = ws.sq[row0 + g];
        zr[g] = ws.z[row0 + g];
      }
      for (int e = tid; e < 16 * RS; e += kThreads) tw[e] = 0.0f;  // tw and tlw
    }
    named_bar_sync(1, kThreads);
    float acc[RBM][4];
#pragma unroll
    for (int nb = 0; nb < RBM; ++nb) acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.0f;
    // RBM <= 2 (G <= 16): this warp's row sums (lanes with mt == 0: rows 8 rb + mg) stay in
    // registers over the chunks, the same additions in the same order as the shared-memory running
    // sums that larger groups keep, written once after the loop (G 9-16: each chunk's shared
    // read-add-write of them was a chain the ring's consumers waited on; ncu, session 34).
    float tsum0 = 0.0f, tlsum0 = 0.0f, tsum1 = 0.0f, tlsum1 = 0.0f;  // row blocks 0, 1
    // One chunk: its keys' weights, then the value product. Instantiated twice: FULL (a whole
    // 64-key chunk, every chunk but a split's last) drops the per-key presence tests, the zeroed
    // value rows and the partial k steps from the common path (ncu at B1: the consumers' chain per
    // chunk is what the ring waits on besides its stages). The same operations on the same
    // operands in both: the same bits. FOLD_DECODE_RING_FULL=0 (full_path 0) runs every chunk
    // through the general form, for A/B runs.
    // WIN: nlo, the chunk's keys before the window (absent, as those from nk on).
    const auto chunk = [&](auto full_tag, const int st, const int nk, const int nlo) {
      constexpr bool FULL = decltype(full_tag)::value;
      unsigned char *sv = ring + st * SB, *sa = sv + 128 * D, *sb = sa + 64 * D;
      const uint16_t *ssc = reinterpret_cast<const uint16_t *>(sb + 64 * D);
      const bool present = FULL || (kq < nk && (!WIN || kq >= nlo));
      if (!FULL) {
        // The split's last, partial chunk: the value rows up to the next 16 keys are zeroed (their
        // weights are zero too; page rows past the length may hold any bits, and 0 x NaN is NaN;
        // E4M3 0x7f / 0xff are NaN). Every panel's whole rows, so the swizzle does not matter:
        // D / 64 panels of 64 rows x 128 bytes, or v8's two planes of 64 rows x D bytes.
        constexpr int kPanels = V8 ? 2 : D / 64, kPieces = (V8 ? D : 128) / 16;  // per row
        const int end = min(kChunk, (nk + 15) & ~15);
        for (int e = tid; e < kPanels * (end - nk) * kPieces; e += kThreads) {
          const int pn = e / ((end - nk) * kPieces), x = e % ((end - nk) * kPieces);
          reinterpret_cast<uint4 *>(sv + (pn * 64 + nk) * 16 * kPieces)[x] =
              make_uint4(0u, 0u, 0u, 0u);
        }
        if (WIN)  // (the window's first chunk: the rows before F, which may hold any bits)
          for (int e = tid; e < kPanels * nlo * kPieces; e += kThreads) {
            const int pn = e / (nlo * kPieces), x = e % (nlo * kPieces);
            reinterpret_cast<uint4 *>(sv + pn * 64 * 16 * kPieces)[x] = make_uint4(0u, 0u, 0u, 0u);
          }
        // These generic writes precede the producer's next TMA into the stage (the next item's).
        fence_proxy_async();
      }
      int4 ka[NP], kb[NP];
#pragma unroll
      for (int i = 0; i < NP; ++i) {
        ka[i] = present ? reinterpret_cast<const int4 *>(sa + kq * D)[u + 4 * i]
                        : make_int4(0, 0, 0, 0);
        kb[i] = present ? reinterpret_cast<const int4 *>(sb + kq * D)[u + 4 * i]
                        : make_int4(0, 0, 0, 0);
      }
      const float skj[2] = {bf16_bits_to_float(ssc[8 * warp + 2 * mt]),
                            bf16_bits_to_float(ssc[8 * warp + 2 * mt + 1])};
      // Weights of every present key (dense: all live and refined), as decode_split_kernel; zero
      // for keys past the split. Lane (g, t): row 8 rb + g, keys 8 warp + 2t + j.
      const bool any_present = FULL || __any_sync(0xffffffffu, present);
      bool mpres[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int key = 8 * warp + 2 * mt + j;
        mpres[j] = FULL || (key < nk && (!WIN || key >= nlo));
      }
      // (RBM <= 2: a loop of constant trip count, unrolled, so that tsum / tlsum stay registers.)
#pragma unroll(RBM <= 2 ? RBM : 1)
      for (int rb = 0; rb < (RBM <= 2 ? RBM : nrb); ++rb) {  // (RBM 1: nrb is 1)
        if (RBM == 2 && rb >= nrb) break;                    // (uniform)
        int32_t ca[4] = {0, 0, 0, 0}, cb[4] = {0, 0, 0, 0};
        if (any_present) fine_dots<NP>(qfrag, rb, lane, ka, kb, ca, cb);
        const int r = 8 * rb + mg;
        float pw[2] = {0.0f, 0.0f}, pex[2] = {0.0f, 0.0f};
        if (r < G) {
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            if (!mpres[j]) continue;
            const float ell = fine_logit(ca[j], ca[2 + j], cb[j], cb[2 + j],
                                         logit_multiplier(sq[r], skj[j], 16 + log2d));
            // exp2_fp_sel: exp2_fp's bits without its two range branches.
            pex[j] = exp2_fp_sel(sub_rn(ell, zr[r]));
            pw[j] = round_operand(pex[j], F16);
          }
          reinterpret_cast<uint32_t *>(wop + r * kWRow)[4 * warp + mt] =
              pack_operands<F16>(pw[0], pw[1]);
        }
        // This warp's row sums over its 8 keys (fixed order: pairs, then the 4 lanes' tree).
        float t = add_rn(pw[0], pw[1]), tl = add_rn(pex[0], pex[1]);
        t = add_rn(t, __shfl_xor_sync(0xffffffffu, t, 1));
        tl = add_rn(tl, __shfl_xor_sync(0xffffffffu, tl, 1));
        t = add_rn(t, __shfl_xor_sync(0xffffffffu, t, 2));
        tl = add_rn(tl, __shfl_xor_sync(0xffffffffu, tl, 2));
        if constexpr (RBM <= 2) {  // (kept by lanes mt == 0, rows r < G only)
          if (rb == 0) {
            tsum0 = add_rn(tsum0, t);
            tlsum0 = add_rn(tlsum0, tl);
          } else {
            tsum1 = add_rn(tsum1, t);
            tlsum1 = add_rn(tlsum1, tl);
          }
        } else if (mt == 0 && r < G) {
          tw[warp * RS + r] = add_rn(tw[warp * RS + r], t);
          tlw[warp * RS + r] = add_rn(tlw[warp * RS + r], tl);
        }
      }
      named_bar_sync(1, kThreads);
      // N^T: this warp's m tile x every row block, over its part of the chunk's keys.
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) {
        const int k0 = kpart * (kChunk / KP) + 16 * kk;
        if (!FULL && k0 >= nk) break;
        uint32_t a[4], a2[4];
        if (V8) {
          ldsm_e4m3_planes(smem_u32(sv) + a_off8 + static_cast<uint32_t>(k0 * D), a, a2);
        } else {
          ldsm_x4_trans(a, smem_u32(sv) + a_off + static_cast<uint32_t>(k0 * 128));
        }
#pragma unroll
        for (int nb = 0; nb < RBM; ++nb) {
          if (RBM == 1 || nb < nrb) {  // (RBM 1: nrb is 1)
            uint32_t bw[2];            // (rows 8 nb + g) x keys k0 + 2t .. | k0 + 8 + 2t ..
            ldsm_x2(bw, b_base + static_cast<uint32_t>((8 * nb * kWRow + k0) * 2));
            mma_16<F16>(acc[nb], a, bw[0], bw[1]);
            if (V8) mma_16<F16>(acc[nb], a2, bw[0], bw[1]);
          }
        }
      }
      named_bar_sync(1, kThreads);  // the stage and the weights are free again
      // Each warp releases the stage for itself (lane 0 after the warp's reads): the stage's
      // readers order before the producer's next copy through the barrier they arrive on.
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[st]);
    };
    for (int32_t j0 = s0; j0 < s1; j0 += kChunk, ++gci) {
      const int st = static_cast<int>(gci % ST);
      const int nk = min(kChunk, s1 - j0);
      mbar_wait(&full[st], (gci / ST) & 1u);
      const int nlo = WIN ? max(0, lo - j0) : 0;
      if (full_path != 0 && nk == kChunk && nlo == 0)
        chunk(std::true_type{}, st, nk, 0);
      else
        chunk(std::false_type{}, st, nk, nlo);
    }
    if (RBM <= 2 && mt == 0) {
      if (mg < G) {
        tw[warp * RS + mg] = tsum0;
        tlw[warp * RS + mg] = tlsum0;
      }
      if (RBM == 2 && nrb == 2 && 8 + mg < G) {
        tw[warp * RS + 8 + mg] = tsum1;
        tlw[warp * RS + 8 + mg] = tlsum1;
      }
    }
    // The split's partial (no cut pages in a dense split). D 64: the second key half's N through
    // shared memory, added after the first's (a fixed order).
    if (KP == 2 && kpart == 1) {
#pragma unroll
      for (int nb = 0; nb < RBM; ++nb)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int d = dcol(i), g = 8 * nb + 2 * mt + (i & 1);
          if (nb < nrb) nred[g * D + d] = acc[nb][i];
        }
    }
    named_bar_sync(1, kThreads);
    const int s = s_item[0], hk = s_item[1], b = s_item[2];
    const int64_t row0 = static_cast<int64_t>(b) * H + hk * G;
    if (kpart == 0) {
      // v8: N of the unscaled planes times 2^v_exp: exact while the product is a normal float.
      // (The reference scales each value before its fma instead; at the range's edges, |N| near
      // 2^-126 or 2^128, the two can differ by more than a rounding: an overflow or subnormal
      // the reference's terms hit and this sum does not, or the reverse.)
      const float sx = V8 ? exp2i(v8_exponent(c, b, hk)) : 1.0f;
#pragma unroll
      for (int nb = 0; nb < RBM; ++nb)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int d = dcol(i), g = 8 * nb + 2 * mt + (i & 1);
          if (nb < nrb && g < G) {
            float n = KP == 2 ? add_rn(acc[nb][i], nred[g * D + d]) : acc[nb][i];
            if (V8) n = mul_rn(n, sx);
            ws.part_n[((row0 + g) * ws.splits + s) * D + d] = n;
          }
        }
    }
    for (int g = tid; g < G; g += kThreads) {
      float t = 0.0f, tl = 0.0f;  // the warps in order
      for (int i = 0; i < 8; ++i) {
        t = add_rn(t, tw[i * RS + g]);
        tl = add_rn(tl, tlw[i * RS + g]);
      }
      ws.part_t[(row0 + g) * ws.splits + s] = t;
      ws.part_tl[(row0 + g) * ws.splits + s] = tl;
    }
    if (tid == 0) {
      const int64_t keys = s_item[3];
      const int64_t bytes = keys * (D + 2) + keys * 2 * D + keys * D;
      add_split_stats(c, ws, stats, pass, b, hk, keys, keys, keys, V8 ? keys : 0, bytes);
    }
    named_bar_sync(1, kThreads);  // q fragments, sq, zr, the row sums: free for the next item
  }
  pdl_trigger();
}
