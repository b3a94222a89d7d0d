// CUDA decode v0: the cache writer, the front (Q planes, reference Z), the split decode,
// the combine and the in-stream guard (notes/decode.md is the spec, src/cpu/decode_*.cpp
// the reference). v0 runs on CUDA cores: integer dots with dp4a, the value product in fp32
// FMA-free arithmetic. Every rounding goes through the FOLD_HD rules of src/decode/, so
// planes, scales, Z, verdicts and even N/T match the reference bit for bit: each (row,
// column) accumulator is owned by one thread that visits keys in index order, as the CPU
// loop does (a tensor-core version may reorder the fp32 sums; the spec allows that).
//
// Launch sequence of one step (fixed, so a CUDA graph can capture it; no host sync):
//   [append: v8 exponent (+ in-block re-scale), rows (planes, V, page sums), heavy list and
//    lengths]  front  decode(pass 0)  combine(pass 0: guard flags)  fixup_z  decode(pass 1)
//   combine(pass 1)
// Pass-1 kernels return at once for groups the guard did not flag.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "core/float_bits.h"
#include "core/status.h"
#include "cuda/launch.h"
#include "decode/decode_plan.h"
#include "decode/e4m3.h"
#include "decode/fp_rules.h"
#include "decode/planes.h"
#include "decode/reference_z.h"
#include "decode/v8_planes.h"

namespace fold::cuda {

namespace {

using namespace fold::decode;

constexpr int kThreads = 256;
constexpr int kChunk = 64;  // keys per inner step of a split (never straddles a page)
constexpr float kLog2eF = 1.44269504088896340736f;
constexpr float kLn2F = 0.693147180559945309417f;

void check(cudaError_t err, const char *what) {
  if (err != cudaSuccess) fail(FOLD_ERR_CUDA, std::string(what) + ": " + cudaGetErrorString(err));
}

__device__ __forceinline__ int64_t key_row(const fold_kvcache_t &c, int32_t b, int hk, int32_t t) {
  const int32_t page =
      c.page_table[static_cast<int64_t>(b) * c.pages_per_request + t / c.page_size];
  return (static_cast<int64_t>(page) * c.n_kv_heads + hk) * c.page_size + t % c.page_size;
}

__device__ __forceinline__ int64_t page_sum_base(const fold_kvcache_t &c, int32_t b, int hk,
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

// ---- cache writer --------------------------------------------------------------------

// Where unit `u` of an append writes. Step mode (request < 0): unit = request slot, one
// token at its length. Extend mode: `request`, tokens [L, L + n); unit u of the rows kernel
// covers one page's share of them.
struct AppendArgs {
  int32_t request;  // -1: step mode
  int32_t n_tokens;
  fold_tensor_t k, v;
  int64_t *stats;  // step mode: counters (FOLD_DECODE_STAT_REJECTED), or NULL
};

// Step mode takes no host check (a captured or compiled step cannot make one): a request
// whose next token has no room or no reserved page is not appended, and is counted, rather
// than written out of bounds. Extend mode was checked on the host.
__device__ __forceinline__ bool step_append_ok(const fold_kvcache_t &c, int32_t b, int32_t L) {
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

// v8: the (request, KV head)'s exponent after the append; grows it (re-quantising the
// request's stored planes, as commit_append does) when a new value would not fit.
__global__ void __launch_bounds__(kThreads)
    append_v8_exp_kernel(const fold_kvcache_t c, const AppendArgs a) {
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
    for (int64_t e = threadIdx.x; e < static_cast<int64_t>(L) * D; e += blockDim.x) {
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
// token order (the page sum of column d is owned by thread d).
__global__ void __launch_bounds__(kThreads)
    append_rows_kernel(const fold_kvcache_t c, const AppendArgs a) {
  __shared__ float y[256];
  __shared__ unsigned int s_amax;
  const int hk = blockIdx.y;
  const int D = c.head_dim, P = c.page_size;
  int32_t b, t0, t1, L;
  if (a.request < 0) {
    b = blockIdx.x;
    L = c.lengths[b];
    if (!step_append_ok(c, b, L)) return;
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
  int vexp = 0;
  if (c.v8) {
    const int32_t x = c.v_exp[static_cast<int64_t>(b) * c.n_kv_heads + hk];
    vexp = x == kVExpUnset ? 0 : x;
  }
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
}

// The heavy-key list of each KV head (thread per head, keys in token order) and then the
// request's length.
__global__ void append_heavy_kernel(const fold_kvcache_t c, const AppendArgs a) {
  const int32_t b = a.request < 0 ? static_cast<int32_t>(blockIdx.x) : a.request;
  const int32_t L = c.lengths[b];
  if (L < 0) return;
  if (a.request < 0 && !step_append_ok(c, b, L)) {
    if (threadIdx.x == 0 && a.stats != nullptr)
      atomicAdd(reinterpret_cast<unsigned long long *>(a.stats) + FOLD_DECODE_STAT_REJECTED, 1ull);
    return;
  }
  const int n = a.request < 0 ? 1 : a.n_tokens;
  for (int hk = threadIdx.x; hk < c.n_kv_heads; hk += blockDim.x) {
    int32_t *list = c.heavy_keys + (static_cast<int64_t>(b) * c.n_kv_heads + hk) * kHeavyKeys;
    int32_t idx[kHeavyKeys];
    uint16_t sc[kHeavyKeys];
    for (int e = 0; e < kHeavyKeys; ++e) {
      idx[e] = list[e];
      sc[e] = idx[e] >= 0 ? c.k_scale[key_row(c, b, hk, idx[e])] : 0;
    }
    for (int32_t t = L; t < L + n; ++t) {
      const uint16_t s = c.k_scale[key_row(c, b, hk, t)];
      int pos = kHeavyKeys;
      while (pos > 0 && (idx[pos - 1] < 0 || sc[pos - 1] < s)) --pos;
      if (pos == kHeavyKeys) continue;
      for (int e = kHeavyKeys - 1; e > pos; --e) {
        idx[e] = idx[e - 1];
        sc[e] = sc[e - 1];
      }
      idx[pos] = t;
      sc[pos] = s;
    }
    for (int e = 0; e < kHeavyKeys; ++e) list[e] = idx[e];
  }
  __syncthreads();
  if (threadIdx.x == 0) c.lengths[b] = L + n;
}

// ---- front: Q planes and the reference Z of each row ------------------------------------

struct Ws {
  int8_t *qa, *qb;
  float *sq, *z;
  int32_t *bad;
  float *part_n, *part_t, *part_tl;
  int32_t *flag;
  unsigned long long *gcnt;  // [B * Hkv][5]: keys, live, refine, v_refine, bytes (pass 0)
  int32_t splits;
};

enum Stat { kKeys = 0, kLive, kRefine, kVRefine, kRows, kFixupRows, kBytes };

__device__ __forceinline__ unsigned long long *stat_ptr(int64_t *stats, int i) {
  return stats == nullptr ? nullptr : reinterpret_cast<unsigned long long *>(stats) + i;
}

// Quantises row `row` of q (block-wide): y = H(q * cmul), planes into qa/qb (global and
// the given shared copies); returns nothing, writes sq.
__device__ __forceinline__ void quantise_q_row(const fold_kvcache_t &c, const fold_tensor_t &q,
                                               float cmul, int b, int h, const Ws &ws, int H,
                                               float *y, unsigned int *s_amax, int8_t *sa,
                                               int8_t *sb) {
  const int D = c.head_dim, tid = threadIdx.x;
  if (tid == 0) *s_amax = 0u;
  if (tid < D)
    y[tid] = mul_rn(load16(c.dtype, q.data, b * q.batch_stride + h * q.head_stride + tid), cmul);
  __syncthreads();
  for (int s = 1; s < D; s *= 2) {
    for (int idx = tid; idx < D / 2; idx += blockDim.x) {
      const int j = (idx / s) * 2 * s + idx % s;
      const float p = y[j], r = y[j + s];
      y[j] = add_rn(p, r);
      y[j + s] = sub_rn(p, r);
    }
    __syncthreads();
  }
  if (tid < D) atomicMax(s_amax, __float_as_uint(y[tid]) & 0x7fffffffu);
  __syncthreads();
  const uint16_t bits = plane_scale_bits(__uint_as_float(*s_amax));
  const float scale = bf16_bits_to_float(bits);
  const int64_t row = static_cast<int64_t>(b) * H + h;
  if (tid < D) {
    int8_t pa = 0, pb = 0;
    if (scale != 0.0f) split_element(div_rn(y[tid], scale), pa, pb);
    ws.qa[row * D + tid] = pa;
    ws.qb[row * D + tid] = pb;
    sa[tid] = pa;
    sb[tid] = pb;
  }
  if (tid == 0) ws.sq[row] = scale;
  __syncthreads();
}

constexpr int kFrontRows = kThreads / 32;  // rows per batch: one warp computes each row's Z

// grid (Hkv, B), 256 threads.
__global__ void __launch_bounds__(kThreads)
    decode_front_kernel(const fold_kvcache_t c, const fold_tensor_t q, const float cmul,
                        const int H, const Ws ws, int64_t *stats) {
  __shared__ float y[256];
  __shared__ unsigned int s_amax;
  __shared__ __align__(16) int8_t qa8[kFrontRows][256];
  __shared__ __align__(16) int8_t qb8[kFrontRows][256];
  __shared__ float x8[kFrontRows][kZSlots];
  __shared__ __align__(16) unsigned char zs_raw[sizeof(ZSample)];
  ZSample &zs = *reinterpret_cast<ZSample *>(zs_raw);
  const int hk = blockIdx.x, b = blockIdx.y;
  const int32_t L = c.lengths[b];
  if (L <= 0) return;
  const int D = c.head_dim, G = H / c.n_kv_heads, log2d = log2_pow2(D);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (tid == 0) {
    plan_reference_sample(
        L, zs, c.heavy_keys + (static_cast<int64_t>(b) * c.n_kv_heads + hk) * kHeavyKeys);
    stat_add(stat_ptr(stats, kBytes), static_cast<int64_t>(zs.n) * (2 * D + 2));
  }
  __syncthreads();
  const int n = zs.n;
  for (int g0 = 0; g0 < G; g0 += kFrontRows) {
    const int rows = min(kFrontRows, G - g0);
    for (int r = 0; r < rows; ++r)
      quantise_q_row(c, q, cmul, b, hk * G + g0 + r, ws, H, y, &s_amax, qa8[r], qb8[r]);
    // Fine logits of the sample (pair = row x slot).
    for (int e = tid; e < rows * n; e += blockDim.x) {
      const int r = e / n, slot = e % n;
      const int64_t kr = key_row(c, b, hk, zs.key[slot]);
      int32_t aa, ba, ab, bb;
      dot2_i8(qa8[r], qb8[r], c.k_a + kr * D, D, aa, ba);
      dot2_i8(qa8[r], qb8[r], c.k_b + kr * D, D, ab, bb);
      const float sq = ws.sq[static_cast<int64_t>(b) * H + hk * G + g0 + r];
      const float sk = bf16_bits_to_float(c.k_scale[kr]);
      x8[r][slot] = fine_logit(aa, ba, ab, bb, logit_multiplier(sq, sk, 16 + log2d));
    }
    __syncthreads();
    if (warp < rows) {
      float *x = x8[warp];
      // M: the largest logit (a max is order-free).
      float m = x[0];
      for (int i = lane; i < n; i += 32) m = x[i] > m ? x[i] : m;
      for (int o = 16; o >= 1; o /= 2) {
        const float other = __shfl_xor_sync(0xffffffffu, m, o);
        m = other > m ? other : m;
      }
      __syncwarp();
      for (int i = lane; i < kZSlots; i += 32) x[i] = i < n ? exp2_fp(sub_rn(x[i], m)) : 0.0f;
      __syncwarp();
      // Stratum weights, in reference_z's sequential order (an earlier slot's new value
      // takes part in the later slots' ranks).
      for (int i = zs.first_stratum; i < n; ++i) {
        int above = 0;
        const float xi = x[i];
        for (int j = zs.first_stratum + lane; j < n; j += 32)
          above += (x[j] > xi || (x[j] == xi && j < i)) ? 1 : 0;
        above = __reduce_add_sync(0xffffffffu, above);
        if (lane == 0 && above >= kZTopUnweighted) x[i] = mul_rn(xi, zs.stratum_weight);
        __syncwarp();
      }
      for (int h = kZSlots / 2; h >= 1; h /= 2) {
        for (int i = lane; i < h; i += 32) x[i] = add_rn(x[i], x[i + h]);
        __syncwarp();
      }
      if (lane == 0)
        ws.z[static_cast<int64_t>(b) * H + hk * G + g0 + warp] = add_rn(m, log2_fp(x[0]));
    }
    __syncthreads();
  }
}

// ---- decode: one split of kSplitKeys keys of one (request, KV head) group ---------------

struct SplitSmem {
  int8_t *qa, *qb;
  float *sq, *z, *thr_live, *thr_ref, *thr_vref;
  float *w, *pe;
  int32_t *flags;
  float *ns, *cutn, *ts, *tlse, *cut, *cutt;
};

__host__ __device__ inline size_t split_smem_bytes(int G, int D) {
  return static_cast<size_t>(2) * G * D + 5u * G * 4 + 2u * G * kChunk * 4 + kChunk * 4 +
         2u * G * D * 4 + 4u * G * 4 + 64;
}

constexpr int kFlagPresent = 8, kFlagLive = 1, kFlagRefine = 2, kFlagVRefine = 4;

// grid (splits, Hkv, B). Pass 0: every group; pass 1: only groups the guard flagged.
__global__ void __launch_bounds__(kThreads)
    decode_split_kernel(const fold_kvcache_t c, const fold_decode_params_t p, const Ws ws,
                        const int pass, int64_t *stats) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int s_any_cut, s_keys, s_live, s_ref, s_vref, s_flush;
  __shared__ unsigned int s_live_mask[kChunk / 32];
  const int s = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
  const int32_t L = c.lengths[b];
  const int32_t s0 = s * kSplitKeys;
  if (s0 >= L) return;
  if (pass == 1 && ws.flag[static_cast<int64_t>(b) * c.n_kv_heads + hk] == 0) return;
  const int32_t s1 = min(L, s0 + kSplitKeys);
  const int D = c.head_dim, H = p.n_heads, G = H / c.n_kv_heads, P = c.page_size;
  const int log2d = log2_pow2(D), tid = threadIdx.x;
  const bool dense = p.dense != 0, v8 = c.v8 != 0, pf16 = c.dtype == FOLD_DTYPE_F16 && !v8;
  SplitSmem sm;
  unsigned char *cur = smem;
  sm.qa = reinterpret_cast<int8_t *>(cur);
  cur += G * D;
  sm.qb = reinterpret_cast<int8_t *>(cur);
  cur += G * D;
  float *f = reinterpret_cast<float *>(cur);
  sm.sq = f;
  sm.z = f + G;
  sm.thr_live = f + 2 * G;
  sm.thr_ref = f + 3 * G;
  sm.thr_vref = f + 4 * G;
  sm.w = f + 5 * G;
  sm.pe = sm.w + G * kChunk;
  sm.flags = reinterpret_cast<int32_t *>(sm.pe + G * kChunk);
  sm.ns = reinterpret_cast<float *>(sm.flags + kChunk);
  sm.cutn = sm.ns + G * D;
  sm.ts = sm.cutn + G * D;
  sm.tlse = sm.ts + G;
  sm.cut = sm.tlse + G;
  sm.cutt = sm.cut + G;

  const int64_t row0 = static_cast<int64_t>(b) * H + hk * G;
  for (int e = tid; e < G * D / 16; e += blockDim.x) {
    reinterpret_cast<int4 *>(sm.qa)[e] = reinterpret_cast<const int4 *>(ws.qa + row0 * D)[e];
    reinterpret_cast<int4 *>(sm.qb)[e] = reinterpret_cast<const int4 *>(ws.qb + row0 * D)[e];
  }
  for (int g = tid; g < G; g += blockDim.x) {
    const float z = ws.z[row0 + g];
    sm.sq[g] = ws.sq[row0 + g];
    sm.z[g] = z;
    sm.thr_live[g] = sub_rn(z, p.depth);
    sm.thr_ref[g] = sub_rn(z, p.refine_band);
    sm.thr_vref[g] = sub_rn(z, p.v_refine_band);
    sm.ts[g] = 0.0f;
    sm.tlse[g] = 0.0f;
    sm.cut[g] = 0.0f;
    sm.cutt[g] = 0.0f;
  }
  for (int e = tid; e < G * D; e += blockDim.x) {
    sm.ns[e] = 0.0f;
    sm.cutn[e] = 0.0f;
  }
  if (tid == 0) {
    s_any_cut = 0;
    s_keys = s_live = s_ref = s_vref = s_flush = 0;
  }
  int vexp = 0;
  if (v8) {
    const int32_t x = c.v_exp[static_cast<int64_t>(b) * c.n_kv_heads + hk];
    vexp = x == kVExpUnset ? 0 : x;
  }
  __syncthreads();

  // The cut mass of the page ending at key j_last goes out: mass x the page's mean V.
  auto flush = [&](int32_t j_last) {
    if (s_any_cut == 0) return;  // uniform: read after a barrier
    const int32_t first = j_last - j_last % P;
    const int32_t count = min(P, L - first);
    const float *sum = c.v_page_sum + page_sum_base(c, b, hk, j_last);
    for (int e = tid; e < G * D; e += blockDim.x) {
      const int g = e / D, d = e % D;
      sm.cutn[e] = add_rn(sm.cutn[e], mul_rn(sm.cut[g], div_rn(sum[d], static_cast<float>(count))));
    }
    __syncthreads();
    for (int g = tid; g < G; g += blockDim.x) {
      sm.cutt[g] = add_rn(sm.cutt[g], sm.cut[g]);
      sm.cut[g] = 0.0f;
    }
    if (tid == 0) {
      s_any_cut = 0;
      s_flush += 1;
    }
    __syncthreads();
  };

  for (int32_t j0 = s0; j0 < s1; j0 += kChunk) {
    if (j0 > s0 && j0 % P == 0) flush(j0 - 1);
    const int nk = min(kChunk, s1 - j0);
    const int64_t rbase = key_row(c, b, hk, j0);  // the chunk's keys are consecutive rows
    // Coarse logits (plane A).
    for (int e = tid; e < G * kChunk; e += blockDim.x) {
      const int g = e / kChunk, k = e % kChunk;
      if (k >= nk) continue;
      int32_t aa, ba;
      dot2_i8(sm.qa + g * D, sm.qb + g * D, c.k_a + (rbase + k) * D, D, aa, ba);
      const float sk = bf16_bits_to_float(c.k_scale[rbase + k]);
      sm.w[e] = coarse_logit(aa, ba, logit_multiplier(sm.sq[g], sk, 8 + log2d));
    }
    __syncthreads();
    // Verdicts, OR-ed over the group's rows.
    if (tid < kChunk) {
      int fl = 0;
      if (tid < nk) {
        bool live = dense, refine = dense, vref = dense && v8;
        for (int g = 0; g < G && !dense; ++g) {
          const float sa = sm.w[g * kChunk + tid];
          live = live || sa >= sm.thr_live[g];
          refine = refine || sa >= sm.thr_ref[g];
          vref = vref || (v8 && sa >= sm.thr_vref[g]);
        }
        refine = refine && live;
        vref = vref && live;
        fl = kFlagPresent | (live ? kFlagLive : 0) | (refine ? kFlagRefine : 0) |
             (vref ? kFlagVRefine : 0);
        atomicAdd(&s_keys, 1);
        if (live) atomicAdd(&s_live, 1);
        if (refine) atomicAdd(&s_ref, 1);
        if (vref) atomicAdd(&s_vref, 1);
        if (!live) atomicOr(&s_any_cut, 1);
      }
      sm.flags[tid] = fl;
      const unsigned int mask = __ballot_sync(0xffffffffu, (fl & kFlagLive) != 0);
      if ((tid & 31) == 0) s_live_mask[tid >> 5] = mask;
    }
    __syncthreads();
    // Weights: live keys 2^(ell - Z) (fine logit if refined), cut keys 2^(s_A - Z).
    for (int e = tid; e < G * kChunk; e += blockDim.x) {
      const int g = e / kChunk, k = e % kChunk;
      const int fl = sm.flags[k];
      if (!(fl & kFlagPresent)) continue;
      const float sa = sm.w[e];
      if (fl & kFlagLive) {
        float ell = sa;
        if (fl & kFlagRefine) {
          int32_t aa, ba, ab, bb;
          const int64_t kr = rbase + k;
          dot2_i8(sm.qa + g * D, sm.qb + g * D, c.k_a + kr * D, D, aa, ba);
          dot2_i8(sm.qa + g * D, sm.qb + g * D, c.k_b + kr * D, D, ab, bb);
          const float sk = bf16_bits_to_float(c.k_scale[kr]);
          ell = fine_logit(aa, ba, ab, bb, logit_multiplier(sm.sq[g], sk, 16 + log2d));
        }
        const float pe = exp2_fp(sub_rn(ell, sm.z[g]));
        sm.pe[e] = pe;
        sm.w[e] = round_operand(pe, pf16);
      } else {
        sm.w[e] = exp2_fp(sub_rn(sa, sm.z[g]));
      }
    }
    __syncthreads();
    // N: thread per (row, column), live keys in index order (bits of the live mask).
    static_assert(kChunk == 64, "the live mask is two words");
    const uint64_t live_mask = (static_cast<uint64_t>(s_live_mask[1]) << 32) | s_live_mask[0];
    for (int e = tid; e < G * D; e += blockDim.x) {
      const int g = e / D, d = e % D;
      float acc = sm.ns[e];
      for (uint64_t m = live_mask; m != 0; m &= m - 1) {
        const int k = __ffsll(static_cast<long long>(m)) - 1;
        const int fl = sm.flags[k];
        const int64_t vi = (rbase + k) * D + d;
        float v;
        if (v8)
          v = v8_value(c.v_a[vi], c.v_b[vi], vexp, (fl & kFlagVRefine) != 0);
        else
          v = load16(c.dtype, c.v, vi);
        acc = add_rn(acc, mul_rn(sm.w[g * kChunk + k], v));
      }
      sm.ns[e] = acc;
    }
    // T, T_lse and the page's cut mass: thread per row.
    for (int g = tid; g < G; g += blockDim.x) {
      float t = sm.ts[g], tl = sm.tlse[g], cu = sm.cut[g];
      for (int k = 0; k < nk; ++k) {
        const int fl = sm.flags[k];
        const float w = sm.w[g * kChunk + k];
        if (fl & kFlagLive) {
          t = add_rn(t, w);
          tl = add_rn(tl, sm.pe[g * kChunk + k]);
        } else {
          cu = add_rn(cu, w);
        }
      }
      sm.ts[g] = t;
      sm.tlse[g] = tl;
      sm.cut[g] = cu;
    }
    __syncthreads();
  }
  flush(s1 - 1);
  for (int e = tid; e < G * D; e += blockDim.x) {
    const int g = e / D, d = e % D;
    ws.part_n[((row0 + g) * ws.splits + s) * D + d] = add_rn(sm.ns[e], sm.cutn[e]);
  }
  for (int g = tid; g < G; g += blockDim.x) {
    ws.part_t[(row0 + g) * ws.splits + s] = add_rn(sm.ts[g], sm.cutt[g]);
    ws.part_tl[(row0 + g) * ws.splits + s] = add_rn(sm.tlse[g], sm.cutt[g]);
  }
  if (tid == 0) {
    const int64_t vbytes = v8 ? D : 2 * D;
    const int64_t bytes = static_cast<int64_t>(s_keys) * (D + 2) +
                          static_cast<int64_t>(s_live) * vbytes + static_cast<int64_t>(s_ref) * D +
                          static_cast<int64_t>(s_vref) * D + static_cast<int64_t>(s_flush) * 4 * D;
    if (pass == 0) {
      unsigned long long *gc = ws.gcnt + (static_cast<int64_t>(b) * c.n_kv_heads + hk) * 5;
      stat_add(gc + 0, s_keys);
      stat_add(gc + 1, s_live);
      stat_add(gc + 2, s_ref);
      stat_add(gc + 3, s_vref);
      stat_add(gc + 4, bytes);
    } else {
      stat_add(stat_ptr(stats, kKeys), s_keys);
      stat_add(stat_ptr(stats, kLive), s_live);
      stat_add(stat_ptr(stats, kRefine), s_ref);
      stat_add(stat_ptr(stats, kVRefine), s_vref);
      stat_add(stat_ptr(stats, kBytes), bytes);
    }
  }
}

// ---- combine (+ guard) --------------------------------------------------------------

// grid (Hkv, B). Pass 0: sums the splits in order, flags groups with a row outside the
// guard window (their output comes from pass 1), else writes o and the LSE.
__global__ void __launch_bounds__(kThreads)
    decode_combine_kernel(const fold_kvcache_t c, const fold_decode_params_t p, const Ws ws,
                          const fold_tensor_t out, float *lse, const int pass, int64_t *stats) {
  __shared__ float s_t[64], s_tl[64];
  __shared__ int s_bad[64];
  __shared__ int s_nbad;
  const int hk = blockIdx.x, b = blockIdx.y;
  const int D = c.head_dim, H = p.n_heads, G = H / c.n_kv_heads, tid = threadIdx.x;
  const int32_t L = c.lengths[b];
  const int64_t grp = static_cast<int64_t>(b) * c.n_kv_heads + hk;
  const int64_t row0 = static_cast<int64_t>(b) * H + hk * G;
  uint16_t *o = static_cast<uint16_t *>(out.data);
  if (pass == 0) {
    if (L <= 0) {
      for (int e = tid; e < G * D; e += blockDim.x) {
        const int g = e / D, d = e % D;
        o[b * out.batch_stride + (hk * G + g) * out.head_stride + d] = 0;
      }
      if (lse != nullptr)
        for (int g = tid; g < G; g += blockDim.x) lse[row0 + g] = __uint_as_float(0xff800000u);
      if (tid == 0) ws.flag[grp] = 0;
      return;
    }
  } else if (L <= 0 || ws.flag[grp] == 0) {
    return;
  }
  const int S = ws.splits, nsplit = (L + kSplitKeys - 1) / kSplitKeys;
  const bool pf16 = c.dtype == FOLD_DTYPE_F16 && !c.v8;
  if (tid == 0) s_nbad = 0;
  for (int g = tid; g < G; g += blockDim.x) {
    float t = 0.0f, tl = 0.0f;
    for (int s = 0; s < nsplit; ++s) {
      t = add_rn(t, ws.part_t[(row0 + g) * S + s]);
      tl = add_rn(tl, ws.part_tl[(row0 + g) * S + s]);
    }
    s_t[g] = t;
    s_tl[g] = tl;
    s_bad[g] = !(t >= exp2i(kGuardLoLog2) && t <= exp2i(pf16 ? kGuardHiLog2F16 : kGuardHiLog2Bf16));
  }
  __syncthreads();
  for (int e = tid; e < G * D; e += blockDim.x) {
    const int g = e / D, d = e % D;
    float n = 0.0f;
    for (int s = 0; s < nsplit; ++s) n = add_rn(n, ws.part_n[((row0 + g) * S + s) * D + d]);
    ws.part_n[((row0 + g) * S) * D + d] = n;  // split 0's slot keeps the sum
    if (!isfinite(n)) atomicOr(&s_bad[g], 1);
  }
  __syncthreads();
  if (pass == 0) {
    for (int g = tid; g < G; g += blockDim.x) {
      ws.bad[row0 + g] = s_bad[g];
      if (s_bad[g]) atomicAdd(&s_nbad, 1);
    }
    __syncthreads();
    const unsigned long long *gc = ws.gcnt + grp * 5;
    if (tid == 0) {
      ws.flag[grp] = s_nbad > 0 ? 1 : 0;
      stat_add(stat_ptr(stats, kRows), G);
      if (s_nbad > 0) {
        stat_add(stat_ptr(stats, kFixupRows), s_nbad);
        stat_add(stat_ptr(stats, kBytes),
                 static_cast<int64_t>(gc[4]) + static_cast<int64_t>(L) * (D + 2));
      } else {
        stat_add(stat_ptr(stats, kKeys), static_cast<int64_t>(gc[0]));
        stat_add(stat_ptr(stats, kLive), static_cast<int64_t>(gc[1]));
        stat_add(stat_ptr(stats, kRefine), static_cast<int64_t>(gc[2]));
        stat_add(stat_ptr(stats, kVRefine), static_cast<int64_t>(gc[3]));
        stat_add(stat_ptr(stats, kBytes), static_cast<int64_t>(gc[4]));
      }
    }
    if (s_nbad > 0) return;  // uniform
  }
  for (int e = tid; e < G * D; e += blockDim.x) {
    const int g = e / D, d = e % D;
    const float t = s_t[g];
    const bool ok = t > 0.0f && isfinite(t);
    const float n = ws.part_n[((row0 + g) * S) * D + d];
    float r = ok ? div_rn(n, t) : 0.0f;
    r = isfinite(r) ? r : 0.0f;
    o[b * out.batch_stride + (hk * G + g) * out.head_stride + d] = store_bits(c.dtype, r);
  }
  if (lse != nullptr)
    for (int g = tid; g < G; g += blockDim.x) {
      const float t = s_t[g];
      const bool ok = t > 0.0f && isfinite(t);
      lse[row0 + g] = ok ? mul_rn(kLn2F, add_rn(ws.z[row0 + g], log2_fp(s_tl[g])))
                         : __uint_as_float(0xff800000u);
    }
}

// ---- guard fix-up: Z = the exact LSE over the coarse logits, for flagged rows -----------

// grid (Hkv, B).
__global__ void __launch_bounds__(kThreads)
    decode_fixup_z_kernel(const fold_kvcache_t c, const fold_decode_params_t p, const Ws ws) {
  __shared__ __align__(16) int8_t qa[256];
  __shared__ __align__(16) int8_t qb[256];
  __shared__ float buf[kThreads];
  __shared__ float red[kThreads / 32];
  const int hk = blockIdx.x, b = blockIdx.y;
  const int32_t L = c.lengths[b];
  const int64_t grp = static_cast<int64_t>(b) * c.n_kv_heads + hk;
  if (L <= 0 || ws.flag[grp] == 0) return;
  const int D = c.head_dim, H = p.n_heads, G = H / c.n_kv_heads, tid = threadIdx.x;
  const int log2d = log2_pow2(D);
  const int64_t row0 = static_cast<int64_t>(b) * H + hk * G;
  for (int g = 0; g < G; ++g) {
    if (ws.bad[row0 + g] == 0) continue;  // uniform
    if (tid < D) {
      qa[tid] = ws.qa[(row0 + g) * D + tid];
      qb[tid] = ws.qb[(row0 + g) * D + tid];
    }
    __syncthreads();
    const float sq = ws.sq[row0 + g];
    auto coarse = [&](int32_t j) {
      const int64_t kr = key_row(c, b, hk, j);
      int32_t aa, ba;
      dot2_i8(qa, qb, c.k_a + kr * D, D, aa, ba);
      return coarse_logit(aa, ba,
                          logit_multiplier(sq, bf16_bits_to_float(c.k_scale[kr]), 8 + log2d));
    };
    float m = __uint_as_float(0xff800000u);
    for (int32_t j = tid; j < L; j += blockDim.x) {
      const float sa = coarse(j);
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
    for (int32_t j0 = 0; j0 < L; j0 += kThreads) {
      const int32_t j = j0 + tid;
      if (j < L) buf[tid] = exp2_fp(sub_rn(coarse(j), m));
      __syncthreads();
      if (tid == 0)
        for (int i = 0; i < kThreads && j0 + i < L; ++i) sum = add_rn(sum, buf[i]);
      __syncthreads();
    }
    if (tid == 0) ws.z[row0 + g] = add_rn(m, log2_fp(sum));
    __syncthreads();
  }
}

Ws carve(const DecodeWorkspace &w) {
  Ws ws;
  ws.qa = w.qa;
  ws.qb = w.qb;
  ws.sq = w.sq;
  ws.z = w.z;
  ws.bad = w.bad;
  ws.part_n = w.part_n;
  ws.part_t = w.part_t;
  ws.part_tl = w.part_tl;
  ws.flag = w.flag;
  ws.gcnt = reinterpret_cast<unsigned long long *>(w.gcnt);
  ws.splits = w.splits;
  return ws;
}

void launch_append_kernels(const fold_kvcache_t &c, const AppendArgs &a, int units_rows, int units,
                           cudaStream_t stream) {
  if (c.v8) {
    append_v8_exp_kernel<<<dim3(units, c.n_kv_heads), kThreads, 0, stream>>>(c, a);
    check(cudaGetLastError(), "append_v8_exp_kernel launch");
  }
  append_rows_kernel<<<dim3(units_rows, c.n_kv_heads), kThreads, 0, stream>>>(c, a);
  check(cudaGetLastError(), "append_rows_kernel launch");
  append_heavy_kernel<<<units, 32, 0, stream>>>(c, a);
  check(cudaGetLastError(), "append_heavy_kernel launch");
}

}  // namespace

void launch_kvcache_append(const fold_kvcache_t &c, int32_t request, int32_t n_tokens,
                           fold_tensor_t k, fold_tensor_t v, void *stream) {
  if (n_tokens <= 0) return;
  const AppendArgs a{request, n_tokens, k, v, nullptr};
  const int pages = (n_tokens + c.page_size - 1) / c.page_size + 1;
  launch_append_kernels(c, a, pages, 1, static_cast<cudaStream_t>(stream));
}

void launch_decode(const fold_kvcache_t &c, const fold_decode_params_t &p, fold_tensor_t q,
                   fold_tensor_t k_step, fold_tensor_t v_step, fold_tensor_t out, float *lse,
                   int64_t *stats, void *workspace, void *stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  const DecodeWorkspace w = decode_workspace(c, p.n_heads, workspace);
  const Ws ws = carve(w);
  if (stats != nullptr)
    check(cudaMemsetAsync(stats, 0, FOLD_DECODE_CUDA_STATS * sizeof(int64_t), stream),
          "cudaMemsetAsync(stats)");
  check(cudaMemsetAsync(w.gcnt, 0, w.gcnt_bytes, stream), "cudaMemsetAsync(workspace)");
  if (k_step.data != nullptr) {
    const AppendArgs a{-1, 1, k_step, v_step, stats};
    launch_append_kernels(c, a, c.batch, c.batch, stream);
  }
  const int G = p.n_heads / c.n_kv_heads;
  const float cmul = mul_rn(p.softmax_scale, kLog2eF);
  decode_front_kernel<<<dim3(c.n_kv_heads, c.batch), kThreads, 0, stream>>>(c, q, cmul, p.n_heads,
                                                                            ws, stats);
  check(cudaGetLastError(), "decode_front_kernel launch");
  const size_t smem = split_smem_bytes(G, c.head_dim);
  if (smem > 48 * 1024)
    check(cudaFuncSetAttribute(decode_split_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem)),
          "cudaFuncSetAttribute(decode_split_kernel)");
  const dim3 split_grid(w.splits, c.n_kv_heads, c.batch);
  const dim3 group_grid(c.n_kv_heads, c.batch);
  for (int pass = 0; pass < 2; ++pass) {
    decode_split_kernel<<<split_grid, kThreads, smem, stream>>>(c, p, ws, pass, stats);
    check(cudaGetLastError(), "decode_split_kernel launch");
    decode_combine_kernel<<<group_grid, kThreads, 0, stream>>>(c, p, ws, out, lse, pass, stats);
    check(cudaGetLastError(), "decode_combine_kernel launch");
    if (pass == 0) {
      decode_fixup_z_kernel<<<group_grid, kThreads, 0, stream>>>(c, p, ws);
      check(cudaGetLastError(), "decode_fixup_z_kernel launch");
    }
  }
}

}  // namespace fold::cuda
