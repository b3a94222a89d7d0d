// The consumers' row arithmetic that v1.1 and v1.2 share: the online softmax of one key block
// (masks, row maxima, alpha, P and l) and the sink's fold into m, l and O.
// Included by forward.cu inside its anonymous namespace, after forward_v1.cuh.

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
