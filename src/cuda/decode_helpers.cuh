// The decode kernels' small shared pieces: a key's cache row and page-sum base, 16-bit loads and
// stores by dtype, the value operand's rounding, exact int8 dots, statistic adds and the sliding
// window's first key. Included by decode.cu inside its anonymous namespace, first.

__device__ __forceinline__ int64_t key_row(const DecodeCache &c, int32_t b, int hk, int32_t t) {
  const int32_t page =
      c.page_table[static_cast<int64_t>(b) * c.pages_per_request + t / c.page_size];
  return (static_cast<int64_t>(page) * c.n_kv_heads + hk) * c.page_size + t % c.page_size;
}

__device__ __forceinline__ int64_t page_sum_base(const DecodeCache &c, int32_t b, int hk,
                                                 int32_t t) {
  const int32_t page =
      c.page_table[static_cast<int64_t>(b) * c.pages_per_request + t / c.page_size];
  return (static_cast<int64_t>(page) * c.n_kv_heads + hk) * c.head_dim;
}

__device__ __forceinline__ float load16(int dtype, const void *base, int64_t i) {
  const uint16_t bits = static_cast<const uint16_t *>(base)[i];
  if (dtype == FOLD_DTYPE_BF16) return __uint_as_float(static_cast<uint32_t>(bits) << 16);
  return __half2float(__ushort_as_half(bits));
}

__device__ __forceinline__ uint16_t store_bits(int dtype, float x) {
  if (dtype == FOLD_DTYPE_BF16) return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  return __half_as_ushort(__float2half_rn(x));
}

// The weight the value product consumes (decode_step.cpp: round_to<bf16/f16>).
__device__ __forceinline__ float round_operand(float x, bool f16) {
  if (f16) return __half2float(__float2half_rn(x));
  return __bfloat162float(__float2bfloat16_rn(x));
}

// Two exact integer dots sharing the key row y (D % 16 == 0, 16-byte aligned rows): x1.y, x2.y.
__device__ __forceinline__ void dot2_i8(const int8_t *x1, const int8_t *x2, const int8_t *y, int D,
                                        int32_t &r1, int32_t &r2) {
  const int4 *a = reinterpret_cast<const int4 *>(x1);
  const int4 *c = reinterpret_cast<const int4 *>(x2);
  const int4 *b = reinterpret_cast<const int4 *>(y);
  int32_t s1 = 0, s2 = 0;
  for (int i = 0; i < D / 16; ++i) {
    const int4 v = b[i], u = a[i], w = c[i];
    s1 = __dp4a(u.x, v.x, s1);
    s1 = __dp4a(u.y, v.y, s1);
    s1 = __dp4a(u.z, v.z, s1);
    s1 = __dp4a(u.w, v.w, s1);
    s2 = __dp4a(w.x, v.x, s2);
    s2 = __dp4a(w.y, v.y, s2);
    s2 = __dp4a(w.z, v.z, s2);
    s2 = __dp4a(w.w, v.w, s2);
  }
  r1 = s1;
  r2 = s2;
}

__device__ __forceinline__ void stat_add(unsigned long long *p, int64_t v) {
  if (p != nullptr && v != 0) atomicAdd(p, static_cast<unsigned long long>(v));
}

// The first key F = max(0, L - w) that a request of L keys sees under the sliding window
// window_before = w (0: none; decode_step.cpp's F_). The kernels' windowed instances (a bool
// template parameter, chosen from the call's arguments only) start their key ranges at F; the
// others never call this.
__host__ __device__ __forceinline__ int32_t window_first(int32_t L, int32_t w) {
  return w > 0 && L > w ? L - w : 0;
}

// Asks L2 for [p, p + bytes) (p and bytes multiples of 16): one bulk instruction, nothing to wait
// for and no register or shared memory held. A small grid's split (launch_decode's l2pf) issues it
// for every row it may gather at its start, so that its later loads, which each depend on the step
// before (split2's verdicts; the ring's free stages), meet L2 instead of DRAM. A hint only: no
// value depends on it (the loads that use the rows are the ones they were, issued where they
// were, and read through L2, which is coherent; the step's new rows are the append kernels',
// launched before the front).
__device__ __forceinline__ void l2_prefetch(const void *p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
}

// Asks L2 for the value rows of nk keys from cache row `row` (v8: both E4M3 planes, D bytes a key
// each; else the 16-bit rows) and for their key plane B: what a small grid's dense ring and split2
// ask of each chunk (l2pf) besides plane A and the scales.
template <int D, bool V8>
__device__ __forceinline__ void l2_prefetch_values_b(const DecodeCache &c, int64_t row,
                                                     uint32_t nk) {
  if constexpr (V8) {
    l2_prefetch(c.v_a + row * D, nk * D);
    l2_prefetch(c.v_b + row * D, nk * D);
  } else {
    l2_prefetch(static_cast<const unsigned char *>(c.v) + row * 2 * D, nk * 2 * D);
  }
  l2_prefetch(c.k_b + row * D, nk * D);
}
