// v1: the forward kernel of forward.cu's header (one CTA per query block; FOLD_FWD_VARIANT=v1).
// Included by forward.cu inside its anonymous namespace, after the shared configuration.

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
