// The cache writer: the append kernels (v8 exponent; rows: planes, V, page sums, heavy-key
// lists; an extend's heavy lists and lengths). Step mode runs inside the decode step without a
// host check (a request without room is counted, not written); extend mode was checked on the
// host. Included by decode.cu inside its anonymous namespace, after decode_helpers.cuh.

// Where unit `u` of an append writes. Step mode (request < 0): unit = request slot, one
// token at its length. Extend mode: `request`, tokens [L, L + n); unit u of the rows kernel
// covers one page's share of them.
struct AppendArgs {
  int32_t request;  // -1: step mode
  int32_t n_tokens;
  fold_tensor_t k, v;
  int64_t *stats;   // step mode without newlen: counters (FOLD_DECODE_STAT_REJECTED), or NULL
  int32_t *newlen;  // step mode in the decode: [batch] each request's length after the append,
                    // published by the decode's front (every rows block reads the old length
                    // meanwhile); the rows kernel then also does the heavy-key lists (no
                    // append_heavy_kernel)
  int32_t *rej;     // with newlen: [batch] 1 where the step token was rejected, else 0
  int32_t pinned;   // fold_kvcache_t::pinned_window: 0, or the window whose earlier keys the
                    // writers forget (decode/pinned_window.h; DecodeCache leaves it out)
};

// Inserts key t of scale s into a KV head's heavy-key list (idx, sc: entries by decreasing
// scale, -1 = empty; ties keep the older key first).
__device__ __forceinline__ void heavy_insert(int32_t *idx, uint16_t *sc, int32_t t, uint16_t s) {
  int pos = kHeavyKeys;
  while (pos > 0 && (idx[pos - 1] < 0 || sc[pos - 1] < s)) --pos;
  if (pos == kHeavyKeys) return;
  for (int e = kHeavyKeys - 1; e > pos; --e) {
    idx[e] = idx[e - 1];
    sc[e] = sc[e - 1];
  }
  idx[pos] = t;
  sc[pos] = s;
}

// Step mode takes no host check (a captured or compiled step cannot make one): a request
// whose next token has no room or no reserved page is not appended, and is counted, rather
// than written out of bounds. Extend mode was checked on the host.
__device__ __forceinline__ bool step_append_ok(const DecodeCache &c, int32_t b, int32_t L) {
  if (L < 0 || L >= c.max_len) return false;
  const int32_t page =
      c.page_table[static_cast<int64_t>(b) * c.pages_per_request + L / c.page_size];
  return page >= 0 && page < c.num_pages;
}

__device__ __forceinline__ int64_t src_row(const AppendArgs &a, const fold_tensor_t &t, int32_t b,
                                           int32_t i, int hk) {
  return a.request < 0 ? b * t.batch_stride + hk * t.head_stride
                       : i * t.token_stride + hk * t.head_stride;
}

// The v8 value exponent of (request b, KV head hk) as the kernels apply it: 0 while nothing
// non-zero has been written (kVExpUnset).
__device__ __forceinline__ int v8_exponent(const DecodeCache &c, int b, int hk) {
  const int32_t x = c.v_exp[static_cast<int64_t>(b) * c.n_kv_heads + hk];
  return x == kVExpUnset ? 0 : x;
}

// v8: the (request, KV head)'s exponent after the append; grows it (re-quantising the
// request's stored planes, as commit_append does) when a new value would not fit.
__global__ void __launch_bounds__(kThreads)
    append_v8_exp_kernel(const DecodeCache c, const AppendArgs a) {
  __shared__ unsigned int s_amax;
  __shared__ int s_from, s_to;
  const int hk = blockIdx.y;
  const int32_t b = a.request < 0 ? static_cast<int32_t>(blockIdx.x) : a.request;
  const int32_t L = c.lengths[b];
  if (L < 0 || (a.request < 0 && !step_append_ok(c, b, L))) return;
  const int n = a.request < 0 ? 1 : a.n_tokens;
  const int D = c.head_dim;
  if (threadIdx.x == 0) s_amax = 0u;
  __syncthreads();
  unsigned int m = 0u;
  for (int e = threadIdx.x; e < n * D; e += blockDim.x) {
    const int i = e / D, d = e % D;
    const float x = load16(c.dtype, a.v.data, src_row(a, a.v, b, i, hk) + d);
    const unsigned int u = __float_as_uint(x) & 0x7fffffffu;
    m = u > m ? u : m;
  }
  atomicMax(&s_amax, m);
  __syncthreads();
  if (threadIdx.x == 0) {
    const float amax = __uint_as_float(s_amax);
    const int32_t old = c.v_exp[static_cast<int64_t>(b) * c.n_kv_heads + hk];
    int32_t x = old;
    if (!c.v_exp_fixed) {
      if (x == kVExpUnset) {
        if (amax > 0.0f) x = v_exponent_for(amax);
      } else if (amax > 0.0f && !v_fits(amax, x)) {
        x = v_exponent_for(amax);
      }
    }
    s_from = old;
    s_to = x;
  }
  __syncthreads();
  const int from = s_from, to = s_to;
  if (from != kVExpUnset && to != from) {
    // A pinned cache re-scales from kept(L) on: the keys before it are never read again, and
    // their pages may be another request's by now.
    const int64_t first = static_cast<int64_t>(pinned_kept(L, a.pinned, c.page_size)) * D;
    for (int64_t e = first + threadIdx.x; e < static_cast<int64_t>(L) * D; e += blockDim.x) {
      const int32_t t = static_cast<int32_t>(e / D);
      const int d = static_cast<int>(e % D);
      const int64_t r = key_row(c, b, hk, t) * D + d;
      const float v = v8_value(c.v_a[r], c.v_b[r], from, true);
      v8_split(v, to, c.v_a[r], c.v_b[r]);
    }
  }
  if (threadIdx.x == 0) c.v_exp[static_cast<int64_t>(b) * c.n_kv_heads + hk] = to;
}

// K planes and scale, V (or its v8 planes) and the page V sums of the unit's tokens, in
// token order (the page sum of column d is owned by thread d). In the decode step (a.newlen
// set) also append_heavy_kernel's work for the block's KV head, and the request's new length
// into a.newlen (and whether its token was rejected into a.rej), by the block of KV head 0: the
// decode's front publishes it into the cache's lengths, when every block here has read the old
// one. One launch less per step, no counter to reset, and the heavy list's loads overlap the
// Hadamard.
__global__ void __launch_bounds__(kThreads)
    append_rows_kernel(const DecodeCache c, const AppendArgs a) {
  static_assert(kHeavyKeys <= kThreads, "a thread per heavy-list entry");
  __shared__ float y[256];
  __shared__ unsigned int s_amax;
  __shared__ int32_t s_hidx[kHeavyKeys];
  __shared__ uint16_t s_hsc[kHeavyKeys];
  const int hk = blockIdx.y;
  const int D = c.head_dim, P = c.page_size;
  const bool fused = a.request < 0 && a.newlen != nullptr;
  int32_t b, t0, t1, L;
  if (a.request < 0) {
    b = blockIdx.x;
    L = c.lengths[b];
    const bool ok = step_append_ok(c, b, L);
    if (fused && hk == 0 && threadIdx.x == 0) {
      a.newlen[b] = ok ? L + 1 : L;
      a.rej[b] = !ok && L >= 0 ? 1 : 0;  // an inactive request (L < 0) is not a rejection
    }
    if (!ok) return;
    t0 = L;
    t1 = L + 1;
  } else {
    b = a.request;
    L = c.lengths[b];
    const int32_t lp = L / P + static_cast<int32_t>(blockIdx.x);
    t0 = max(L, lp * P);
    t1 = min(L + a.n_tokens, (lp + 1) * P);
    if (t0 >= t1) return;
  }
  const int tid = threadIdx.x;
  int32_t *heavy = c.heavy_keys + (static_cast<int64_t>(b) * c.n_kv_heads + hk) * kHeavyKeys;
  const int32_t kept = pinned_kept(L, a.pinned, P);
  if (fused && tid < kHeavyKeys) {
    // Entries outside [0, L) (a hand-made cache) are empty: their page would be stale. A pinned
    // cache's entries before kept(L) are forgotten below, unread (their page may be released).
    const int32_t e = heavy[tid];
    const int32_t idx = e >= 0 && e < L ? e : -1;
    s_hidx[tid] = idx;
    s_hsc[tid] = idx >= kept && idx >= 0 ? c.k_scale[key_row(c, b, hk, idx)] : 0;
  }
  uint16_t last_bits = 0;
  const int vexp = c.v8 ? v8_exponent(c, b, hk) : 0;
  for (int32_t t = t0; t < t1; ++t) {
    const int32_t i = t - L;
    const int64_t r = key_row(c, b, hk, t);
    if (tid == 0) s_amax = 0u;
    if (tid < D) y[tid] = load16(c.dtype, a.k.data, src_row(a, a.k, b, i, hk) + tid);
    __syncthreads();
    for (int h = 1; h < D; h *= 2) {
      for (int idx = tid; idx < D / 2; idx += blockDim.x) {
        const int j = (idx / h) * 2 * h + idx % h;
        const float p = y[j], q = y[j + h];
        y[j] = add_rn(p, q);
        y[j + h] = sub_rn(p, q);
      }
      __syncthreads();
    }
    if (tid < D) atomicMax(&s_amax, __float_as_uint(y[tid]) & 0x7fffffffu);
    __syncthreads();
    const uint16_t bits = plane_scale_bits(__uint_as_float(s_amax));
    last_bits = bits;
    const float scale = bf16_bits_to_float(bits);
    if (tid < D) {
      int8_t pa = 0, pb = 0;
      if (scale != 0.0f) split_element(div_rn(y[tid], scale), pa, pb);
      c.k_a[r * D + tid] = pa;
      c.k_b[r * D + tid] = pb;
      if (tid == 0) c.k_scale[r] = bits;
      const float v = load16(c.dtype, a.v.data, src_row(a, a.v, b, i, hk) + tid);
      float *sum = c.v_page_sum + page_sum_base(c, b, hk, t);
      sum[tid] = (t % P == 0) ? v : add_rn(sum[tid], v);
      if (c.v8) {
        v8_split(v, vexp, c.v_a[r * D + tid], c.v_b[r * D + tid]);
      } else {
        static_cast<uint16_t *>(c.v)[r * D + tid] = store_bits(c.dtype, v);
      }
    }
    __syncthreads();
  }
  if (fused && tid == 0) {
    int32_t idx[kHeavyKeys];
    uint16_t sc[kHeavyKeys];
    for (int e = 0; e < kHeavyKeys; ++e) {
      idx[e] = s_hidx[e];
      sc[e] = s_hsc[e];
    }
    if (a.pinned > 0) heavy_forget_before<kHeavyKeys>(idx, sc, kept);
    heavy_insert(idx, sc, L, last_bits);
    for (int e = 0; e < kHeavyKeys; ++e) heavy[e] = idx[e];
  }
}

// The heavy-key list of each KV head (thread per head, keys in token order) and then the
// request's length.
__global__ void append_heavy_kernel(const DecodeCache c, const AppendArgs a) {
  const int32_t b = a.request < 0 ? static_cast<int32_t>(blockIdx.x) : a.request;
  const int32_t L = c.lengths[b];
  if (L < 0) return;
  if (a.request < 0 && !step_append_ok(c, b, L)) {
    if (threadIdx.x == 0 && a.stats != nullptr)
      atomicAdd(reinterpret_cast<unsigned long long *>(a.stats) + FOLD_DECODE_STAT_REJECTED, 1ull);
    return;
  }
  const int n = a.request < 0 ? 1 : a.n_tokens;
  const int32_t kept = pinned_kept(L, a.pinned, c.page_size);
  for (int hk = threadIdx.x; hk < c.n_kv_heads; hk += blockDim.x) {
    int32_t *list = c.heavy_keys + (static_cast<int64_t>(b) * c.n_kv_heads + hk) * kHeavyKeys;
    int32_t idx[kHeavyKeys];
    uint16_t sc[kHeavyKeys];
    for (int e = 0; e < kHeavyKeys; ++e) {
      // Entries outside [0, L) (a hand-made cache) are empty: their page would be stale. A
      // pinned cache's entries before kept(L) are forgotten at the first token, unread.
      idx[e] = list[e] >= 0 && list[e] < L ? list[e] : -1;
      sc[e] = idx[e] >= kept && idx[e] >= 0 ? c.k_scale[key_row(c, b, hk, idx[e])] : 0;
    }
    for (int32_t t = L; t < L + n; ++t) {
      // (Per token, as the CPU writer: the list does not depend on how tokens were grouped.)
      if (a.pinned > 0)
        heavy_forget_before<kHeavyKeys>(idx, sc, pinned_kept(t, a.pinned, c.page_size));
      heavy_insert(idx, sc, t, c.k_scale[key_row(c, b, hk, t)]);
    }
    for (int e = 0; e < kHeavyKeys; ++e) list[e] = idx[e];
  }
  __syncthreads();
  if (threadIdx.x == 0) c.lengths[b] = L + n;
}
