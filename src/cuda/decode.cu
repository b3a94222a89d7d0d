// CUDA decode: the cache writer, the front (Q planes, reference Z), the split decode, the
// combine and the in-stream guard (notes/decode.md is the spec, src/cpu/decode_*.cpp the
// reference). v1 (notes/decode.md section 10): a parallel front, and split kernels that
// stream the planes into registers (4 threads per key, 16-byte loads, the next chunk's
// loads in flight) and the values into shared memory with cp.async. Still CUDA cores:
// integer dots with dp4a (exact, so any order), the value product with one fma per key and
// column (the spec's rounding). Every rounding goes through the FOLD_HD rules of
// src/decode/, and every fp32 sum keeps the reference's order (each (row, column)
// accumulator owned by one thread, keys in index order), so planes, scales, Z, verdicts
// and N/T match the CPU reference bit for bit.
//
// v2: the same orders, with the value product's format fixed at compile time, the row sums
// on otherwise idle threads, one barrier less per chunk, a combine over (row, column) blocks
// and a parallel stratum rank in the front (notes/decode.md section 10, "v2"). Session 3:
// the value product is split into slices (decode_plan.h pv_slices; a spec change made in
// the CPU reference too) so that every warp takes a share of each chunk, the front picks its
// top strata by warp arg-max, and the combine stages the split partials in shared memory.
// The v1 and v3 kernels were retired (notes/decode.md section 11).
//
// Session 8 (notes/decode.md section 15): the value product of every bf16 / fp16-V split runs on
// the tensor cores (mma.m16n8k16, V^T by ldmatrix.trans); the weights are still the
// reference's bits, but N's fp32 sums (and the dense ring's T sums) take the hardware's order,
// so those outputs match the reference within one output rounding, not bit for bit. v8 caches
// keep the fma value product and the reference's orders. Invariance (alone = in a batch =
// under replay) does not depend on this: every order is fixed by the split.
//
// Launch sequence of one step (fixed, so a CUDA graph can capture it; no host sync):
//   [append: v8 exponent (+ in-block re-scale), rows (planes, V, page sums, heavy lists, new
//    lengths into the workspace)]  front (publishes the lengths, resets the step's counters)
//   decode(pass 0)  combine(pass 0: guard flags)
//   decode(pass 1: the step's read statistics; then over the flagged groups, each split block
//   first recomputes its group's flagged rows' Z (the fix-up), and each group's last split
//   combines it)
// No memset: at batch 1 a step is mostly launches (notes/decode.md section 18). Pass 1 returns
// at once when the guard flagged nothing.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#include "core/float_bits.h"
#include "core/status.h"
#include "cuda/decode_cache.h"
#include "cuda/hopper/mbarrier.cuh"
#include "cuda/hopper/tma.cuh"
#include "cuda/hopper/warpgroup.cuh"
#include "cuda/launch.h"
#include "cuda/launch_setup.h"
#include "cuda/tensor_map.h"
#include "decode/decode_plan.h"
#include "decode/e4m3.h"
#include "decode/fp_rules.h"
#include "decode/pinned_window.h"
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

// A default-on switch read per call: unset or anything but "0" is on (for A/B runs).
bool env_on(const char *name) {
  const char *v = std::getenv(name);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

void check(cudaError_t err, const char *what) {
  if (err != cudaSuccess) fail(FOLD_ERR_CUDA, std::string(what) + ": " + cudaGetErrorString(err));
}

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

// ---- cache writer --------------------------------------------------------------------

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

// Programmatic dependent launch (on by default; FOLD_DECODE_PDL=0 turns it off). A kernel
// launched with programmatic stream serialization may start while its predecessor finishes;
// every decode kernel therefore waits (griddepcontrol.wait: the predecessor complete and its
// writes visible) before its first read, and signals at its end that its dependents may
// launch. Both are no-ops for a normal launch. (H200: 1-4 us less per B1 step, same bits.)
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void pdl_trigger() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// ---- front: Q planes and the reference Z of each row ------------------------------------

struct Ws {
  int8_t *qa, *qb;
  float *sq, *z;
  float *e;  // [rows]: the coarse error per unit of key scale (planes.h), written by the front
  int32_t *bad;
  float *part_n, *part_t, *part_tl;
  int32_t *flag;
  unsigned long long *gcnt;  // [B * Hkv][5]: keys, live, refine, v_refine, bytes (pass 0)
  int32_t *newlen, *rej;     // the step's append (AppendArgs)
  int32_t *nflag, *flist;    // the flagged groups (pass 1 runs over this list)
  int32_t *p1done;           // [B * Hkv]: pass-1 split blocks done
  int32_t *ring_next;        // the dense ring's next item (reset by the front)
  int32_t splits;
};

// Flags group grp for pass 1: the first to flag it appends it to the list. The list's order
// depends on timing, but no value does: pass 1 computes each listed group alone.
__device__ __forceinline__ void flag_group(const Ws &ws, int64_t grp) {
  if (atomicOr(&ws.flag[grp], 1) == 0) ws.flist[atomicAdd(ws.nflag, 1)] = static_cast<int32_t>(grp);
}

enum Stat { kKeys = 0, kLive, kRefine, kVRefine, kRows, kFixupRows, kBytes };

__device__ __forceinline__ unsigned long long *stat_ptr(int64_t *stats, int i) {
  return stats == nullptr ? nullptr : reinterpret_cast<unsigned long long *>(stats) + i;
}

// The lane's E elements of q row h (as loaded; quantise_q_row_warp scales them).
template <int E>
__device__ __forceinline__ void load_q_row(const DecodeCache &c, const fold_tensor_t &q, int b,
                                           int h, float (&x)[E]) {
  const int64_t base = b * q.batch_stride + h * q.head_stride + E * (threadIdx.x & 31);
#pragma unroll
  for (int e = 0; e < E; ++e) x[e] = load16(c.dtype, q.data, base + e);
}

// Prefetches the lane's elements of q row h into L1 (no register held until load_q_row).
template <int E>
__device__ __forceinline__ void prefetch_q_row(const fold_tensor_t &q, int b, int h) {
  const int64_t base = b * q.batch_stride + h * q.head_stride + E * (threadIdx.x & 31);
  asm volatile("prefetch.global.L1 [%0];" ::"l"(static_cast<const uint16_t *>(q.data) + base));
}

// Quantises q row h in one warp: lane owns elements [E * lane, E * lane + E) (D = 32 E).
// The butterfly stages are hadamard_unnormalised's (h = 1, 2, ...), the first log2 E in
// registers, the rest across lanes: element j (bit h clear) gets x[j] + x[j + h], element
// j + h gets x[j] - x[j + h], the same two roundings as the reference.
template <int E>
__device__ __forceinline__ void quantise_q_row_warp(const DecodeCache &c, const float (&x)[E],
                                                    float cmul, int b, int h, int H, const Ws &ws,
                                                    int8_t *sa, int8_t *sb, float *s_sq) {
  constexpr int D = 32 * E;
  const int lane = threadIdx.x & 31;
  float y[E];
#pragma unroll
  for (int e = 0; e < E; ++e) y[e] = mul_rn(x[e], cmul);
  constexpr int kLogE = E == 2 ? 1 : (E == 4 ? 2 : 3);
#pragma unroll
  for (int ls = 0; ls < kLogE; ++ls) {
    const int s = 1 << ls;
#pragma unroll
    for (int e = 0; e < E; ++e)
      if ((e & s) == 0) {
        const float a = y[e], r = y[e + s];
        y[e] = add_rn(a, r);
        y[e + s] = sub_rn(a, r);
      }
  }
#pragma unroll
  for (int ls = 1; ls < 32; ls *= 2) {
    const bool upper = (lane & ls) != 0;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const float other = __shfl_xor_sync(0xffffffffu, y[e], ls);
      y[e] = upper ? sub_rn(other, y[e]) : add_rn(y[e], other);
    }
  }
  unsigned int m = 0u;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const unsigned int u = __float_as_uint(y[e]) & 0x7fffffffu;
    m = u > m ? u : m;
  }
  m = __reduce_max_sync(0xffffffffu, m);
  const float scale = bf16_bits_to_float(plane_scale_bits(__uint_as_float(m)));
  const int64_t row = static_cast<int64_t>(b) * H + h;
  // The planes' L1 norms (exact integers) give the row's coarse error per unit of key scale
  // (planes.h, coarse_error_from_l1).
  int32_t l1a = 0, l1b = 0;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    int8_t pa = 0, pb = 0;
    if (scale != 0.0f) split_element(div_rn(y[e], scale), pa, pb);
    const int d = E * lane + e;
    ws.qa[row * D + d] = pa;
    ws.qb[row * D + d] = pb;
    sa[d] = pa;
    sb[d] = pb;
    l1a += pa < 0 ? -int32_t{pa} : int32_t{pa};
    l1b += pb < 0 ? -int32_t{pb} : int32_t{pb};
  }
  l1a = static_cast<int32_t>(__reduce_add_sync(0xffffffffu, static_cast<unsigned int>(l1a)));
  l1b = static_cast<int32_t>(__reduce_add_sync(0xffffffffu, static_cast<unsigned int>(l1b)));
  if (lane == 0) {
    ws.sq[row] = scale;
    ws.e[row] = coarse_error_from_l1(l1a, l1b, scale, log2_pow2(D));
    *s_sq = scale;
  }
}

// The group's largest coarse error per unit of key scale (the rule of planes.h's
// coarse_untrusted is per key against the group's rows together, as the CPU reference). Called
// by whole warps: the lanes load the rows in parallel (a loop of G loads, each waited for before
// the next, sat at the start of every split block), then one reduction. For finite q rows E is
// never negative nor NaN (planes.h), so its bits order as its values, +inf included: the CPU
// reference's max. A non-finite q row (which the CPU reference refuses; a graphed step may still
// carry one) gives E = -0 or NaN, whose bits rank above +inf: such values are skipped, as the float
// comparison skipped them, so that one bad row does not switch the rule off for its group.
__device__ __forceinline__ float group_e_max(const Ws &ws, int64_t row0, int G) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  unsigned int m = 0u;
  for (int g = lane; g < G; g += 32) {
    const unsigned int e = __float_as_uint(ws.e[row0 + g]);
    m = e > m && e <= 0x7f800000u ? e : m;
  }
  return __uint_as_float(__reduce_max_sync(0xffffffffu, m));
}

// c += A B on the integer tensor cores: mma.m16n8k32 s8 x s8 -> s32 (exact). Fragments
// (PTX ISA, "Matrix Fragments for mma.m16n8k32"), lane = 4 g + t: A a0 = (row g, k 4t..4t+3),
// a1 = (row g + 8, same k), a2 = (row g, k 16 + 4t..), a3 = (row g + 8, k 16 + 4t..);
// B b0 = (col g, k 4t..4t+3), b1 = (col g, k 16 + 4t..); C c0, c1 = (row g, cols 2t, 2t + 1),
// c2, c3 = (row g + 8, same cols). An integer dot does not depend on the order of k, so each
// lane may feed any 8 bytes of its key as long as its A registers hold the q bytes at the
// same positions (the split kernel's qfrag).
__device__ __forceinline__ void mma_s8(int32_t c[4], const uint4 &a, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
}

constexpr int kFrontRows = kThreads / 32;  // rows per block step: one warp per row

// grid (Hkv, B, row blocks), FT threads (256; 128 in the HALF form); D = 32 E. Every step is
// parallel: the sample's slots are placed by one thread each (plan_sample_shape), q rows are
// quantised one warp each, the sample's fine logits on the int8 tensor cores (each warp
// kZSlots / (FT / 32) slots, 32 or 64, x the step's rows; on dp4a,
// one thread per slot, they were most of the front's time at large batch), and each row's Z one
// warp (max, 2^(s - M), the stratum ranks among the unweighted values, the halving tree: three
// levels in registers, five by shuffles).
// Four blocks per SM (D <= 128; 64 registers, no spills): the front is a chain of dependent loads
// (ncu, notes/decode.md section 16), so resident blocks are what hide it. D 256 spills under it.
// The front also starts the step's bookkeeping (no memset precedes it): with `appended`, it
// takes each request's length from the append (Ws::newlen) and block (0, b, 0) publishes it into
// the cache (the later kernels read it there); the first block of each group resets the group's
// counters, block (0, 0, 0) the step's (the flagged-group count and `stats`; pass 1 adds the
// rejected appends from Ws::rej). Every writer of those counters runs after the front.
// (A group without keys returns before its read counters and pass-1 counter are reset: nothing
// reads them.)
// SMALL: a small batch (fewer groups than SMs: one row per block, or 8 where that grid would not
// fit one block per SM; the front's chain is the step's critical path): the sample's key rows are
// prefetched into L2 and the first q row into L1, holding no registers. Else (eight rows per block,
// several blocks per SM hiding each other's chains) the first row step's q values are loaded into
// registers at the start, as before this session. Two instances, so that each gets its own register
// allocation. UNROLL (where the front's grid fits in one block per SM; FOLD_DECODE_FRONT_UNROLL=0
// turns it off): SMALL with every sample tile's key loads issued before the first tile's MMAs,
// registers unbounded (up to 168 at D 128: one block per SM). UNROLL without SMALL (U2, a grid of
// at most two blocks per SM): the same loads at up to 128 registers. FT = 128 (HALF, a large
// batch at G <= 4): four warps, a group of up to four rows per block, eight blocks per SM.
// WIN (a step with a sliding window, window = its window_before > 0): the sample is the window's
// (reference_z.h plan_window_sample): the plain sample's shape for L - F keys, the heavy entries
// shifted by F (those at or before F dropped), every slot's key shifted by F. F = 0 gives the
// plain sample. (Without WIN `window` is not read.)
template <int E, bool SMALL, bool UNROLL = false, int FT = kThreads, bool WIN = false>
__global__ void __launch_bounds__(FT, UNROLL ? (SMALL ? 1 : 2) : (E == 8 ? 2 : (FT == 128 ? 8 : 4)))
    decode_front_kernel(const DecodeCache c, const fold_tensor_t q, const float cmul, const int H,
                        const Ws ws, int64_t *stats, const int rows_per_cta, const int appended,
                        const int early, const int window) {
  pdl_wait();
  // OVERLAP (the dense ring or split2 follows): its blocks may start now, beside this grid; they
  // read nothing this kernel writes before their own wait (decode_split_ring_kernel,
  // split2_item).
  if (early != 0) pdl_trigger();
  constexpr int D = 32 * E;
  constexpr int FR = FT / 32;  // rows per block step: one warp per row
  static_assert(FT == kThreads || (FT == kThreads / 2 && !SMALL && !UNROLL),
                "the 128-thread form is the large batch's, with the tile loop");
  static_assert(
      FT >= kZStrata && FT >= kHeavyKeys && FT >= FOLD_DECODE_CUDA_STATS && FT >= kZNewest,
      "one thread per stratum, heavy key, statistic and newest key");
  __shared__ __align__(16) int8_t qa8[FR][D];
  __shared__ __align__(16) int8_t qb8[FR][D];
  __shared__ float x8[FR][kZSlots];
  __shared__ float s_sq[FR];
  __shared__ int32_t s_key[kZSlots];
  __shared__ int64_t s_kr[kZSlots];
  __shared__ float s_sk[kZSlots];
  __shared__ int32_t s_heavy[kHeavyKeys];
  __shared__ __align__(16) unsigned char shape_raw[sizeof(ZSampleShape)];
  ZSampleShape &sh = *reinterpret_cast<ZSampleShape *>(shape_raw);
  const int hk = blockIdx.x, b = blockIdx.y;
  const int G = H / c.n_kv_heads, log2d = log2_pow2(D);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // This block's rows [g_begin, g_end) of the group (blockIdx.z: several blocks per group when
  // the batch is small, so that more SMs share the front; every row's values are the same
  // whichever block computes them). Block z = 0 does the group's once-only work.
  const int g_begin = blockIdx.z * rows_per_cta, g_end = min(G, g_begin + rows_per_cta);
  const bool first_block = blockIdx.z == 0;
  // The loads that depend on nothing are issued together (the front is a chain of dependent
  // loads): the length, the heavy-key list and the first row step's q values.
  const int32_t L = appended ? ws.newlen[b] : c.lengths[b];
  int32_t heavy = -1;
  if (tid < kHeavyKeys)
    heavy = c.heavy_keys[(static_cast<int64_t>(b) * c.n_kv_heads + hk) * kHeavyKeys + tid];
  float q0[SMALL ? 1 : E];
  if (warp < min(FR, g_end - g_begin)) {
    if constexpr (SMALL)
      prefetch_q_row<E>(q, b, hk * G + g_begin + warp);
    else
      load_q_row<E>(c, q, b, hk * G + g_begin + warp, q0);
  }
  // The guard state of the group, cleared for the combine (which ORs into it from several
  // blocks).
  for (int g = g_begin + tid; g < g_end; g += blockDim.x)
    ws.bad[static_cast<int64_t>(b) * H + hk * G + g] = 0;
  if (tid == 0 && first_block) ws.flag[static_cast<int64_t>(b) * c.n_kv_heads + hk] = 0;
  if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) {  // the step's counters
    if (tid == 0) {
      *ws.nflag = 0;
      *ws.ring_next = 0;
    }
    if (stats != nullptr && tid < FOLD_DECODE_CUDA_STATS) stats[tid] = 0;
  }
  // (Returns before the group's counters are reset, at the end: they are read only for groups
  // with keys. An append leaves L >= 1, so this request's length did not change.)
  if (L <= 0) return;
  const int32_t F = WIN ? window_first(L, window) : 0;  // the window's first key
  if (tid < kHeavyKeys) s_heavy[tid] = WIN ? (heavy > F ? heavy - F : -1) : heavy;
  __syncthreads();
  if (tid == 0) {
    plan_sample_shape(L - F, s_heavy, sh);
    // The sample's bytes join the group's read counters (add_step_stats adds them to `stats`).
    if (first_block)
      ws.gcnt[(static_cast<int64_t>(b) * c.n_kv_heads + hk) * 5 + 4] =
          static_cast<unsigned long long>(sh.n) * (2 * D + 2);
  }
  __syncthreads();
  const int n = sh.n;
  const bool strata = sh.m > kZStrata;
  const int first_stratum = strata ? sh.first_middle : n;
  // Place the slots (each slot written by exactly one thread; WIN: the window's keys, F on).
  if (tid == 0) s_key[0] = F;
  if (tid < sh.n_newest) s_key[1 + tid] = F + sh.newest_lo + tid;
  if (tid < sh.n_heavy) s_key[1 + sh.n_newest + tid] = F + sh.heavy_mid[tid];
  if (strata) {
    if (tid < kZStrata) s_key[sh.first_middle + tid] = F + sample_stratum_key(sh, s_heavy, tid);
  } else if (tid < sh.m) {
    const int slot = sample_exact_middle_slot(sh, s_heavy, 1 + tid);
    if (slot >= 0) s_key[slot] = F + 1 + tid;
  }
  __syncthreads();
  // Slot tid's key row and scale, for the warps' tiles below. SMALL: the row's two planes are
  // prefetched into L2 at once (no registers held), so that their latency overlaps the q
  // quantisation instead of following it (B1 D 64: front 9.9 -> 8.9 us; with 8 rows per block
  // the extra instructions cost more than they hide: B32 15.2 -> 16.0 us).
  if constexpr (FT == kThreads) {
    if (tid < n) {
      const int64_t kr = key_row(c, b, hk, s_key[tid]);
      s_kr[tid] = kr;
      if constexpr (SMALL)
        for (int o = 0; o < D; o += 128) {
          asm volatile("prefetch.global.L2 [%0];" ::"l"(c.k_a + kr * D + o));
          asm volatile("prefetch.global.L2 [%0];" ::"l"(c.k_b + kr * D + o));
        }
      s_sk[tid] = bf16_bits_to_float(c.k_scale[kr]);
    }
  } else {
    // HALF: two slots per thread, their page-table loads issued together, then their scales.
    const int i1 = tid + FT;
    const int64_t kr0 = tid < n ? key_row(c, b, hk, s_key[tid]) : 0;
    const int64_t kr1 = i1 < n ? key_row(c, b, hk, s_key[i1]) : 0;
    const uint16_t sc0 = tid < n ? c.k_scale[kr0] : 0, sc1 = i1 < n ? c.k_scale[kr1] : 0;
    if (tid < n) {
      s_kr[tid] = kr0;
      s_sk[tid] = bf16_bits_to_float(sc0);
    }
    if (i1 < n) {
      s_kr[i1] = kr1;
      s_sk[i1] = bf16_bits_to_float(sc1);
    }
  }
  __syncthreads();
  // The sample's fine logits on the int8 tensor cores (mma.m16n8k32, as the split kernels): warp
  // w takes slots 8 kTiles w .. 8 kTiles (w + 1) - 1 as kTiles tiles of 8 keys (4 tiles at 256
  // threads, 8 at 128; B: lane (g, t) feeds key 8 tile + g's
  // bytes 16 (t + 4 i) .. + 15, NP pieces per plane), A = the step's q planes (row g plane A, row
  // g + 8 plane B, the same byte positions). The integer dots are exact, so the logits are the
  // reference's bits.
  constexpr int NP = D / 64;
  constexpr int kTiles = kZSlots / (8 * FR);  // tiles of 8 slots per warp
  const int mg = lane >> 2, mt = lane & 3;
  for (int g0 = g_begin; g0 < g_end; g0 += FR) {
    const int rows = min(FR, g_end - g0);
    if (warp < rows) {
      float x[E];
      if (!SMALL && g0 == g_begin) {
#pragma unroll
        for (int e = 0; e < E; ++e) x[e] = q0[SMALL ? 0 : e];
      } else {
        load_q_row<E>(c, q, b, hk * G + g0 + warp, x);
      }
      quantise_q_row_warp<E>(c, x, cmul, b, hk * G + g0 + warp, H, ws, qa8[warp], qb8[warp],
                             &s_sq[warp]);
    }
    __syncthreads();
    uint4 qf[2 * NP];  // A fragments: zero for rows >= rows (their smem holds no step's q)
#pragma unroll
    for (int sl = 0; sl < 2 * NP; ++sl) {
      const int o = 16 * (mt + 4 * (sl >> 1)) + 8 * (sl & 1);
      qf[sl] = make_uint4(0u, 0u, 0u, 0u);
      if (mg < rows) {
        const uint32_t *pa = reinterpret_cast<const uint32_t *>(qa8[mg] + o);
        const uint32_t *pb = reinterpret_cast<const uint32_t *>(qb8[mg] + o);
        qf[sl] = make_uint4(pa[0], pb[0], pa[1], pb[1]);
      }
    }
    // The lane's key bytes of tile `tile` (zeros past the sample), and that tile's fine logits.
    auto load_tile = [&](int tile, int4(&la)[NP], int4(&lb)[NP]) {
      const int slot = 8 * (kTiles * warp + tile) + mg;  // this lane's key (B column mg)
      const int64_t kr = slot < n ? s_kr[slot] : -1;
#pragma unroll
      for (int i = 0; i < NP; ++i) {
        la[i] = kr >= 0 ? reinterpret_cast<const int4 *>(c.k_a + kr * D)[mt + 4 * i]
                        : make_int4(0, 0, 0, 0);
        lb[i] = kr >= 0 ? reinterpret_cast<const int4 *>(c.k_b + kr * D)[mt + 4 * i]
                        : make_int4(0, 0, 0, 0);
      }
    };
    auto tile_logits = [&](int tile, const int4(&la)[NP], const int4(&lb)[NP]) {
      const int base = 8 * (kTiles * warp + tile);
      int32_t ca[4] = {0, 0, 0, 0}, cb[4] = {0, 0, 0, 0};
#pragma unroll
      for (int i = 0; i < NP; ++i) {
        mma_s8(ca, qf[2 * i], la[i].x, la[i].y);
        mma_s8(ca, qf[2 * i + 1], la[i].z, la[i].w);
        mma_s8(cb, qf[2 * i], lb[i].x, lb[i].y);
        mma_s8(cb, qf[2 * i + 1], lb[i].z, lb[i].w);
      }
      // C: row mg (plane A: c0, c1; plane B: c2, c3) x slots base + 2 mt + j.
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int slot = base + 2 * mt + j;
        if (mg < rows && slot < n)
          x8[mg][slot] = fine_logit(ca[j], ca[2 + j], cb[j], cb[2 + j],
                                    logit_multiplier(s_sq[mg], s_sk[slot], 16 + log2d));
      }
    };
    if constexpr (UNROLL && NP <= 2) {
      // A small batch (one row per block, few blocks: the front's chain is the step's critical
      // path): every tile's key loads first, one memory latency per warp instead of one per tile
      // (up to 64 registers of loads).
      int4 la[kTiles][NP], lb[kTiles][NP];
#pragma unroll
      for (int tile = 0; tile < kTiles; ++tile) load_tile(tile, la[tile], lb[tile]);
#pragma unroll
      for (int tile = 0; tile < kTiles; ++tile)
        if (8 * (kTiles * warp + tile) < n) tile_logits(tile, la[tile], lb[tile]);  // uniform
    } else {
      // Not unrolled: unrolled, ptxas (64 registers) interleaved each tile's four key loads with
      // its mma's, four memory latencies per tile instead of one (ncu, B128: front 37.5 -> 42.9
      // us after this session's bookkeeping moved in); as a loop the loads issue together.
#pragma unroll 1
      for (int tile = 0; tile < kTiles; ++tile) {
        if (8 * (kTiles * warp + tile) >= n) break;  // warp-uniform
        int4 la[NP], lb[NP];
        load_tile(tile, la, lb);
        tile_logits(tile, la, lb);
      }
    }
    __syncthreads();
    if (warp < rows) {
      float *x = x8[warp];
      float m = x[0];
#pragma unroll
      for (int k = 0; k < kZSlots / 32; ++k) {
        const int i = lane + 32 * k;
        if (i < n) m = x[i] > m ? x[i] : m;
      }
#pragma unroll
      for (int o = 16; o >= 1; o /= 2) {
        const float other = __shfl_xor_sync(0xffffffffu, m, o);
        m = other > m ? other : m;
      }
      float v[kZSlots / 32];
#pragma unroll
      for (int k = 0; k < kZSlots / 32; ++k) {
        const int i = lane + 32 * k;
        v[k] = i < n ? exp2_fp(sub_rn(x[i], m)) : 0.0f;
      }
      if (first_stratum < n) {
        const float w = div_rn(static_cast<float>(sh.m - kZTopUnweighted),
                               static_cast<float>(kZStrata - kZTopUnweighted));
        // A stratum slot keeps weight 1 iff its rank (values above it, or equal at a lower
        // slot) is < kZTopUnweighted. The values are exp2_fp's, never NaN (it maps NaN to
        // +inf) nor negative, so that order is total (value descending, then slot ascending)
        // and bit patterns order like the values: the kZTopUnweighted first slots are picked
        // by as many rounds of a warp arg-max (~150 instructions; counting every rank took
        // ~10k per warp, the front's largest cost).
        unsigned int top = 0u;  // bit k: slot lane + 32 k is a top stratum sample
        for (int round = 0; round < kZTopUnweighted; ++round) {
          // This lane's best untaken stratum slot as (value bits, kZSlots - slot) > 0.
          unsigned int bh = 0u, bl = 0u;
#pragma unroll
          for (int k = 0; k < kZSlots / 32; ++k) {
            const int i = lane + 32 * k;
            const unsigned int h = __float_as_uint(v[k]), l = kZSlots - i;
            const bool cand = i >= first_stratum && i < n && ((top >> k) & 1u) == 0u;
            if (cand && (h > bh || (h == bh && l > bl))) {
              bh = h;
              bl = l;
            }
          }
          const unsigned int wh = __reduce_max_sync(0xffffffffu, bh);
          const unsigned int wl = __reduce_max_sync(0xffffffffu, bh == wh ? bl : 0u);
          const int slot = kZSlots - static_cast<int>(wl);  // >= 128 strata: always found
          if ((slot & 31) == lane) top |= 1u << (slot >> 5);
        }
#pragma unroll
        for (int k = 0; k < kZSlots / 32; ++k) {
          const int i = lane + 32 * k;
          if (i >= first_stratum && i < n && ((top >> k) & 1u) == 0u) v[k] = mul_rn(v[k], w);
        }
      }
      // Halving tree: h = 128, 64, 32 inside the lane (slot i = lane + 32 k), then shuffles.
#pragma unroll
      for (int k = 0; k < 4; ++k) v[k] = add_rn(v[k], v[k + 4]);
#pragma unroll
      for (int k = 0; k < 2; ++k) v[k] = add_rn(v[k], v[k + 2]);
      v[0] = add_rn(v[0], v[1]);
#pragma unroll
      for (int h = 16; h >= 1; h /= 2) {
        const float other = __shfl_down_sync(0xffffffffu, v[0], h);
        if (lane < h) v[0] = add_rn(v[0], other);
      }
      if (lane == 0)
        ws.z[static_cast<int64_t>(b) * H + hk * G + g0 + warp] = add_rn(m, log2_fp(v[0]));
    }
    __syncthreads();
  }
  // The group's counters and the request's length, at the end: nothing in the front reads them,
  // and at the start their stores held registers that the q values then spilled for. (Indices
  // from blockIdx and threadIdx again, L from the workspace: nothing kept live for this.)
  if (blockIdx.z == 0) {
    const int64_t grp = static_cast<int64_t>(blockIdx.y) * c.n_kv_heads + blockIdx.x;
    const unsigned t = threadIdx.x;
    if (t < 4) ws.gcnt[grp * 5 + t] = 0ull;  // [4]: the sample's bytes (written above)
    if (t == 4) ws.p1done[grp] = 0;
    if (t == 5 && blockIdx.x == 0 && appended) c.lengths[blockIdx.y] = ws.newlen[blockIdx.y];
  }
  pdl_trigger();
}

// ---- decode: one split of kSplitKeys keys of one (request, KV head) group ---------------
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

#include "cuda/decode_split2.cuh"

// ---- dense split through a TMA ring, value product on the tensor cores
// ---------------------------
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
// WIN (bf16 / fp16 V; a step whose sliding window `window` = window_before can hide a key): each
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
                             const int early, const int window) {
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
  static_assert(!WIN || !V8, "a windowed v8 step runs the plain split (the reference's orders)");
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

// ---- screened split through a ring, software-pipelined by one chunk ---------------------------
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

// ---- combine (+ guard) --------------------------------------------------------------

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
    const int32_t L = lengths[grp / n_kv_heads];
    const int32_t fl = flag[grp];
    if (rej != nullptr && grp % n_kv_heads == 0) v[7] += rej[grp / n_kv_heads] != 0;
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

Ws carve(const DecodeWorkspace &w) {
  Ws ws;
  ws.qa = w.qa;
  ws.qb = w.qb;
  ws.sq = w.sq;
  ws.z = w.z;
  ws.e = w.e;
  ws.bad = w.bad;
  ws.part_n = w.part_n;
  ws.part_t = w.part_t;
  ws.part_tl = w.part_tl;
  ws.flag = w.flag;
  ws.gcnt = reinterpret_cast<unsigned long long *>(w.gcnt);
  ws.newlen = w.newlen;
  ws.rej = w.rej;
  ws.nflag = w.nflag;
  ws.flist = w.flist;
  ws.p1done = w.p1done;
  ws.ring_next = w.ring_next;
  ws.splits = w.splits;
  return ws;
}

void launch_append_kernels(const DecodeCache &c, const AppendArgs &a, int units_rows, int units,
                           cudaStream_t stream) {
  if (c.v8) {
    append_v8_exp_kernel<<<dim3(units, c.n_kv_heads), kThreads, 0, stream>>>(c, a);
    check(cudaGetLastError(), "append_v8_exp_kernel launch");
  }
  append_rows_kernel<<<dim3(units_rows, c.n_kv_heads), kThreads, 0, stream>>>(c, a);
  check(cudaGetLastError(), "append_rows_kernel launch");
  if (a.newlen != nullptr) return;  // the decode step: the rows kernel and the front do the rest
  append_heavy_kernel<<<units, 32, 0, stream>>>(c, a);
  check(cudaGetLastError(), "append_heavy_kernel launch");
}

}  // namespace

void launch_kvcache_append(const fold_kvcache_t &cache, int32_t request, int32_t n_tokens,
                           fold_tensor_t k, fold_tensor_t v, void *stream) {
  if (n_tokens <= 0) return;
  const DecodeCache c = device_view(cache);
  const AppendArgs a{request, n_tokens, k, v, nullptr, nullptr, nullptr, cache.pinned_window};
  const int pages = (n_tokens + c.page_size - 1) / c.page_size + 1;
  launch_append_kernels(c, a, pages, 1, static_cast<cudaStream_t>(stream));
}

namespace {
// The ring kernel's instance: head dim, row blocks rounded up to a power of two, value format.
using RingKernel = void (*)(const CUtensorMap, const CUtensorMap, const CUtensorMap,
                            const CUtensorMap, const CUtensorMap, const DecodeCache,
                            const fold_decode_params_t, const Ws, const int, int64_t *, const int,
                            const int32_t *, const int, const int);
template <int NP, bool F16, bool V8 = false, bool WIN = false>
RingKernel ring_kernel_rb(int nrb, int stages) {
  if (nrb <= 1)
    return stages == 4 ? decode_split_ring_kernel<NP, 1, F16, 4, V8, WIN>
                       : decode_split_ring_kernel<NP, 1, F16, 2, V8, WIN>;
  return nrb <= 2   ? decode_split_ring_kernel<NP, 2, F16, 2, V8, WIN>
         : nrb <= 4 ? decode_split_ring_kernel<NP, 4, F16, 2, V8, WIN>
                    : decode_split_ring_kernel<NP, 8, F16, 2, V8, WIN>;
}
// The ring's stages at G <= 8 (one row block): 4 at D 64, 2 at D 128; more groups 2.
// FOLD_DECODE_RING_STAGES = 2 / 4 overrides at G <= 8 (A/B runs). Graphed and interleaved on the
// H200 (session 21, notes/decode.md section 30): at D 64, 4 stages (a 72 KB block, still three
// per SM) against 2: B1 L8K H 9/3 -3.3%, B32 L16K H 16/2 -1.1%; at D 128 4 stages leave one
// block per SM (+11-19% from B8 up) and 3 stages (two blocks per SM) moved nothing (-0.3% to
// +0.9%). No value depends on it.
// Any other value of the variable is ignored. `forced`: the variable chose.
int ring_stages(int D, int G, bool &forced) {
  forced = false;
  if (G > 8) return 2;
  const char *v = std::getenv("FOLD_DECODE_RING_STAGES");
  forced = v != nullptr && (std::strcmp(v, "2") == 0 || std::strcmp(v, "4") == 0);
  if (forced) return v[0] - '0';
  return D == 64 ? 4 : 2;
}
// The blocks of a ring kernel resident at once (all SMs) when each also holds the fetching
// blocks' request table (batch + 1 ints, up to 4 KB), or 0 where the table would cost a resident
// block or the batch exceeds 1,024 requests: fetching is then off (one block per item). (At
// D 128, G 9-16 the 3 blocks per SM that registers allow leave under 700 bytes of shared memory;
// at D 64 with 4 stages, ~1.1-1.3 KB.)
int64_t fetch_resident(RingKernel kernel, size_t smem, int batch) {
  if (batch > 1024) return 0;
  const auto k = reinterpret_cast<const void *>(kernel);
  const size_t with_table = smem + static_cast<size_t>(batch + 1) * 4;
  set_max_dynamic_smem(k, static_cast<int>(with_table), "decode_split_ring_kernel");
  const int r = resident_blocks(k, kRingThreads, with_table);
  return r == resident_blocks(k, kRingThreads, smem) ? static_cast<int64_t>(r) * sm_count() : 0;
}
RingKernel ring_kernel(int D, int G, bool f16, int stages, bool v8, bool win) {
  const int nrb = (G + 7) / 8;
  if (win) {  // (bf16 / fp16 V only: split_ring_supported)
    if (D == 64)
      return f16 ? ring_kernel_rb<1, true, false, true>(nrb, stages)
                 : ring_kernel_rb<1, false, false, true>(nrb, stages);
    return f16 ? ring_kernel_rb<2, true, false, true>(nrb, stages)
               : ring_kernel_rb<2, false, false, true>(nrb, stages);
  }
  // v8: bf16 weight operands whatever the queries' type (the bf16 guard window).
  if (v8)
    return D == 64 ? ring_kernel_rb<1, false, true>(nrb, stages)
                   : ring_kernel_rb<2, false, true>(nrb, stages);
  if (D == 64)
    return f16 ? ring_kernel_rb<1, true>(nrb, stages) : ring_kernel_rb<1, false>(nrb, stages);
  return f16 ? ring_kernel_rb<2, true>(nrb, stages) : ring_kernel_rb<2, false>(nrb, stages);
}

// The plain split's instance: head dim, value product on MMA (bf16 / fp16 V) or fma (v8),
// pass 0's grid or pass 1's list, and EXT (a step with a window or sinks).
template <bool LIST, bool EXT = false>
auto plain_split_kernel(int head_dim, bool mma) {
  return head_dim == 64    ? (mma ? decode_split_kernel<1, true, LIST, EXT>
                                  : decode_split_kernel<1, false, LIST, EXT>)
         : head_dim == 128 ? (mma ? decode_split_kernel<2, true, LIST, EXT>
                                  : decode_split_kernel<2, false, LIST, EXT>)
                           : (mma ? decode_split_kernel<4, true, LIST, EXT>
                                  : decode_split_kernel<4, false, LIST, EXT>);
}

// A decode kernel launch, with programmatic stream serialization unless FOLD_DECODE_PDL=0
// (the kernels wait with pdl_wait before their first read).
template <typename... KArgs, typename... Args>
void launch_k(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
              bool pdl, const char *what, Args &&...args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  check(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...), what);
}
}  // namespace

void launch_decode(const fold_kvcache_t &cache, const fold_decode_params_t &p, fold_tensor_t q,
                   fold_tensor_t k_step, fold_tensor_t v_step, fold_tensor_t out, float *lse,
                   int64_t *stats, void *workspace, void *stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  const DecodeCache c = device_view(cache);
  const DecodeWorkspace w = decode_workspace(cache, p.n_heads, workspace);
  const Ws ws = carve(w);
  // No memset: the front resets the step's counters and `stats` (decode_front_kernel).
  const bool appended = k_step.data != nullptr;
  if (appended) {
    const AppendArgs a{-1, 1, k_step, v_step, nullptr, w.newlen, w.rej, cache.pinned_window};
    launch_append_kernels(c, a, c.batch, c.batch, stream);
  }
  const int G = p.n_heads / c.n_kv_heads;
  const float cmul = mul_rn(p.softmax_scale, kLog2eF);
  // A sliding window that can hide a key (window_before < max_len: else F = 0 for every request,
  // the plain step) and sinks run their own instances (WIN / EXT), chosen from these arguments
  // only, never from the lengths or the batch, so that a request's bits are the same alone and in
  // any batch; a step with neither runs exactly the kernels it ran before them. A windowed step:
  // the front's WIN forms (SMALL or not), for pass 0 with bf16 / fp16 V the WIN instances of the
  // dense ring (dense) or split2 (screened, where it runs), else the plain split (split_item's
  // WIN; v8 keeps its reference orders there; the opt-in screen ring takes no window), the EXT
  // combines and pass 1. Sinks alone: the same front and pass-0 split as without them, the EXT
  // combines and pass 1 (sinks act in the combine only).
  const bool win = p.window_before > 0 && p.window_before < c.max_len;
  const bool ext = win || p.sinks != nullptr;
  // Front rows per block: a warp per row and 8 rows per block when the groups alone fill the
  // GPU. Else (a small batch: the SMALL instance) one row per block where that grid fits one
  // block per SM, so that the front spreads over more SMs (its sample is then read once per row,
  // from L2); past that, 8 rows per block: one row per block there made several waves of
  // blocks, each a chain of loads (B32 L32K H 32/2: 1,024 blocks), where 8 rows per block are
  // one wave, UNROLL where it fits: graphed attend -3.5% at B32 L32K G 16, -1.1 to -2.3% at B16
  // L16K G 8 and B8 L16K G 4 (session 33, notes/decode.md section 42). Scheduling only: no value
  // depends on it.
  const int groups = c.n_kv_heads * c.batch;
  const bool rows_fit = static_cast<int64_t>(groups) * G <= sm_count();
  int rows_per_cta = groups < sm_count() && rows_fit ? 1 : kFrontRows;
  bool small = groups < sm_count(), formed = false, form_unroll = false;
  // FOLD_DECODE_FRONT_FORM (A/B runs; read per call): "R[s][u]", R in {1, 2, 4, 8} rows per
  // block, s the SMALL instance, u UNROLL wherever the grid fits (with s). Scheduling only.
  if (const char *f = std::getenv("FOLD_DECODE_FRONT_FORM")) {
    if (f[0] == '1' || f[0] == '2' || f[0] == '4' || f[0] == '8') {
      rows_per_cta = f[0] - '0';
      small = std::strchr(f, 's') != nullptr;
      formed = true;
      form_unroll = small && std::strchr(f, 'u') != nullptr;
    }
  }
  // Two more forms where the groups alone fill the GPU (not SMALL), by the 256-thread grid's
  // size (blocks of 8 rows) against the SMs:
  // - U2 (at most two blocks per SM): UNROLL's tile loads issued together, at two blocks per SM
  //   (up to 128 registers) instead of one; the chain per block is what the front costs there.
  // - HALF (more than four blocks per SM, G <= 4): 128-thread blocks, one group of up to four
  //   rows each (a warp per row), eight per SM at 64 registers, so that the grid takes half the
  //   waves (B128 H 32/8's 1,024 groups: one instead of two; session 35, front 36.3 -> 31.6 us,
  //   attend -1%), and no warp idles while the rows are quantised and their Z reduced. Each warp
  //   takes 64 sample slots (8 tiles) instead of 32: a longer chain, which lost where the
  //   256-thread grid is one wave (B32 H 32/8 +1%, B128 H 9/3 D 64 +3.5%).
  // FOLD_DECODE_FRONT_U2 / FOLD_DECODE_FRONT_HALF (read per call): "0" off, "1" wherever the form
  // can run (not SMALL, D <= 128, and G <= 4 for HALF), unset by the rule; a
  // FOLD_DECODE_FRONT_FORM form keeps neither. Scheduling only: no value depends on them.
  const int64_t blocks8 = static_cast<int64_t>(groups) * ((G + kFrontRows - 1) / kFrontRows);
  const auto form_knob = [&](const char *name, bool rule) {
    const char *v = std::getenv(name);
    return v == nullptr ? rule : std::strcmp(v, "1") == 0;
  };
  const bool large = !small && !formed && c.head_dim <= 128 && !win;
  const bool half = large && G <= kFrontRows / 2 &&
                    form_knob("FOLD_DECODE_FRONT_HALF", blocks8 > 4 * int64_t{sm_count()});
  const bool u2 =
      large && !half && form_knob("FOLD_DECODE_FRONT_U2", blocks8 <= 2 * int64_t{sm_count()});
  if (half) rows_per_cta = kFrontRows / 2;
  const dim3 front_grid(c.n_kv_heads, c.batch, (G + rows_per_cta - 1) / rows_per_cta);
  // UNROLL where one block per SM holds the whole front (the small batches whose front is one
  // chain per row): -2.5% to -3.3% of the graphed attend on the B1 D 64 captures' shape, -0.1% to
  // -0.9% at B1 L32K / B4 L16K D 128 (session 24, notes/decode.md section 34); the same bits.
  // FOLD_DECODE_FRONT_UNROLL=0 turns it off (A/B runs).
  const bool unroll =
      small && c.head_dim <= 128 && (formed ? form_unroll : env_on("FOLD_DECODE_FRONT_UNROLL")) &&
      static_cast<int64_t>(front_grid.x) * front_grid.y * front_grid.z <= sm_count();
  auto front = c.head_dim == 64 ? (unroll  ? decode_front_kernel<2, true, true>
                                   : small ? decode_front_kernel<2, true>
                                   : half  ? decode_front_kernel<2, false, false, kThreads / 2>
                                   : u2    ? decode_front_kernel<2, false, true>
                                           : decode_front_kernel<2, false>)
               : c.head_dim == 128
                   ? (unroll  ? decode_front_kernel<4, true, true>
                      : small ? decode_front_kernel<4, true>
                      : half  ? decode_front_kernel<4, false, false, kThreads / 2>
                      : u2    ? decode_front_kernel<4, false, true>
                              : decode_front_kernel<4, false>)
                   : (small ? decode_front_kernel<8, true> : decode_front_kernel<8, false>);
  // A windowed step: the WIN forms, SMALL or not (no UNROLL, HALF nor U2: scheduling only).
  if (win) {
    constexpr int T = kThreads;
    front = c.head_dim == 64    ? (small ? decode_front_kernel<2, true, false, T, true>
                                         : decode_front_kernel<2, false, false, T, true>)
            : c.head_dim == 128 ? (small ? decode_front_kernel<4, true, false, T, true>
                                         : decode_front_kernel<4, false, false, T, true>)
                                : (small ? decode_front_kernel<8, true, false, T, true>
                                         : decode_front_kernel<8, false, false, T, true>);
  }
  const bool pdl = env_on("FOLD_DECODE_PDL");
  const bool ring = split_ring_supported(c, p) && (!win || c.v8 == 0);
  const bool screen = !win && !ring && split_screen_supported(c, p);
  // A windowed step's pass-0 split grid: only the splits a window of w keys can touch, at most
  // (w - 1) / kSplitKeys + 2 of them (the plain split and split2 count them from the window's
  // first split), not the capacity's: a narrow window at a large batch otherwise launched
  // thousands of blocks that return at once. Scheduling only: each split computes what it did.
  const unsigned win_splits =
      win ? static_cast<unsigned>(std::min<int64_t>(
                w.splits, (static_cast<int64_t>(p.window_before) - 1) / kSplitKeys + 2))
          : static_cast<unsigned>(w.splits);
  // split2's form follows how many blocks per SM its grid holds (decode_split2.cuh). The grid
  // follows the cache's capacity (max_len), not the lengths, which the host does not read.
  // Windowed steps with bf16 / fp16 V take its WIN instances (v8's keep the plain split).
  const Split2Plan plan2 = split2_plan(c, p, static_cast<int64_t>(win_splits) * groups, sm_count());
  const bool split2 = (!win || c.v8 == 0) && !ring && !screen && plan2.on;
  // OVERLAP: the front lets the dense ring or split2 start beside it; they issue their first loads
  // of the cache while the front computes Z and wait only before reading its output
  // (decode_split_ring_kernel, split2_item). FOLD_DECODE_OVERLAP=0 (read per call) turns it off,
  // for A/B runs (the front then triggers at its end; split2 keeps its loads before its wait,
  // which then overlap nothing); without PDL it does nothing. Scheduling only: the same bits.
  const int early = (ring || split2) && pdl && env_on("FOLD_DECODE_OVERLAP") ? 1 : 0;
  // The lengths those kernels read before their wait: the append's, which the front publishes.
  const int32_t *lengths = appended ? w.newlen : c.lengths;
  launch_k(front, front_grid, dim3(half ? kThreads / 2 : kThreads), 0, stream, pdl,
           "decode_front_kernel launch", c, q, cmul, p.n_heads, ws, stats, rows_per_cta,
           appended ? 1 : 0, early, p.window_before);
  const bool mma = c.v8 == 0;
  const size_t smem = split_smem_bytes(G, c.head_dim, mma);
  const auto split = win ? plain_split_kernel<false, true>(c.head_dim, mma)
                         : plain_split_kernel<false>(c.head_dim, mma);
  const auto split_list = ext ? plain_split_kernel<true, true>(c.head_dim, mma)
                              : plain_split_kernel<true>(c.head_dim, mma);
  const auto combine1 = ext ? decode_combine_kernel<true> : decode_combine_kernel<false>;
  const auto combine2 = ext ? decode_combine2_kernel<true> : decode_combine2_kernel<false>;
  const dim3 cgrid(c.n_kv_heads, c.batch, (G * c.head_dim + kThreads - 1) / kThreads);
  const int64_t cblocks1 = static_cast<int64_t>(cgrid.x) * cgrid.y * cgrid.z;
  const size_t combine_smem = combine_smem_bytes(w.splits, cblocks1);
  // Pass 0's combine at two elements per thread (EPT 2) where its grid of one would take more
  // than one wave (eight blocks per SM) and the grid of two, with its doubled staging, fits one
  // (B128 H 32/8 D 128: 2,048 blocks -> 1,024). FOLD_DECODE_COMBINE_EPT = 1 / 2 (read per call)
  // forces it (A/B runs). The same sums in the same order: no bit depends on it.
  const dim3 cgrid2(c.n_kv_heads, c.batch, (G * c.head_dim + 2 * kThreads - 1) / (2 * kThreads));
  const int64_t cblocks2 = static_cast<int64_t>(cgrid2.x) * cgrid2.y * cgrid2.z;
  const size_t combine_smem2 = combine_smem_bytes(w.splits, cblocks2, 2);
  const char *ept_knob = std::getenv("FOLD_DECODE_COMBINE_EPT");
  bool ept2 = ept_knob != nullptr
                  ? std::strcmp(ept_knob, "2") == 0
                  : G * c.head_dim >= 2 * kThreads && cblocks1 > 8 * int64_t{sm_count()};
  if (ept2) {
    // Its residency as the occupancy calculator answers it (its staging may exceed the default
    // 48 KB, so the attribute is set first); the rule's "fits one wave" is over that count.
    set_max_dynamic_smem(reinterpret_cast<const void *>(combine2), static_cast<int>(combine_smem2),
                         "decode_combine2_kernel");
    if (ept_knob == nullptr)
      ept2 = cblocks2 <= int64_t{resident_blocks(reinterpret_cast<const void *>(combine2), kThreads,
                                                 combine_smem2)} *
                             sm_count();
  }
  // Pass 1's split also combines (its last block per group): room for the combine's staging.
  const size_t smem_list = std::max(smem, combine_smem);
  set_max_dynamic_smem(reinterpret_cast<const void *>(split), static_cast<int>(smem),
                       "decode_split_kernel");
  set_max_dynamic_smem(reinterpret_cast<const void *>(split_list), static_cast<int>(smem_list),
                       "decode_split_kernel");
  set_max_dynamic_smem(reinterpret_cast<const void *>(combine1), static_cast<int>(combine_smem),
                       "decode_combine_kernel");
  const dim3 split_grid(w.splits, c.n_kv_heads, c.batch);
  const dim3 win_grid(win_splits, c.n_kv_heads, c.batch);  // (the window's splits: above)
  bool stages_forced = false;
  int stages = ring_stages(c.head_dim, G, stages_forced);
  if (ring && stages == 4 && !stages_forced) {
    // 4 stages (a 74.5 KB block at D 64) only where the fetching blocks' request table (batch + 1
    // ints, below) still fits beside them at the same residency; else 2 stages with fetching, the
    // form measured at every batch before 4 stages (without it a large batch would run one block
    // per item: 6% slower at D 64 in section 27; 4 stages were measured at B1 and B32 only).
    // Scheduling only: no value depends on it.
    if (fetch_resident(ring_kernel(c.head_dim, G, c.dtype == FOLD_DTYPE_F16, 4, c.v8 != 0, win),
                       split_ring_smem_bytes(G, c.head_dim, 4), c.batch) == 0)
      stages = 2;
  }
  const size_t smem_ring = ring ? split_ring_smem_bytes(G, c.head_dim, stages) : 0;
  const auto split_ring =
      ring_kernel(c.head_dim, G, c.dtype == FOLD_DTYPE_F16, stages, c.v8 != 0, win);
  if (ring)
    set_max_dynamic_smem(reinterpret_cast<const void *>(split_ring), static_cast<int>(smem_ring),
                         "decode_split_ring_kernel");
  const size_t smem2 = split2 ? split2_smem_bytes(G, c.head_dim, plan2.sa) : 0;
  const Split2Kernel split2_k =
      split2 ? split2_kernel(plan2, G, c.head_dim, c.dtype == FOLD_DTYPE_F16, c.v8 != 0, win)
             : nullptr;
  if (split2)
    set_max_dynamic_smem(reinterpret_cast<const void *>(split2_k), static_cast<int>(smem2),
                         "decode_split2_kernel");
  const size_t smem_screen = screen ? split_screen_smem_bytes(G, c.head_dim) : 0;
  const bool f16 = c.dtype == FOLD_DTYPE_F16;
  auto split_screen =
      c.head_dim == 64
          ? (f16 ? decode_split_screen_kernel<1, true> : decode_split_screen_kernel<1, false>)
          : (f16 ? decode_split_screen_kernel<2, true> : decode_split_screen_kernel<2, false>);
  if (screen)
    set_max_dynamic_smem(reinterpret_cast<const void *>(split_screen),
                         static_cast<int>(smem_screen), "decode_split_screen_kernel");
  // The rings' TMA maps over the cache's rows (page, KV head, row): V in 64 x 64-value boxes
  // with the 128-byte swizzle (v8: each plane in 64-row boxes, swizzled by 128 bytes at D 128 and
  // 64 at D 64), the K planes in 64-row boxes, the scales as rows of 64.
  // L2 promotion: 128 bytes for the dense ring (H200, graphed, interleaved, two runs: 1.4-3.3%
  // faster than 256 at B8-B128 D 128, 1-2% at D 64 B32-B64, the same at B1; none or 64 measured
  // as 128; session 23), 256 for the opt-in screen ring (not measured). FOLD_DECODE_L2PROMO
  // (0 / 64 / 128 / 256, read at every call) sets both, for A/B runs; the bits never depend on it.
  CUtensorMap vmap{}, vbmap{}, amap{}, bmap{}, smap{};
  if (ring || screen) {
    const CUtensorMapL2promotion promo =
        l2_promotion("FOLD_DECODE_L2PROMO", ring ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B
                                                 : CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
    const uint64_t rows = static_cast<uint64_t>(c.num_pages) * c.n_kv_heads * c.page_size;
    const uint64_t D = static_cast<uint64_t>(c.head_dim);
    const uint64_t pdims[2] = {D, rows}, pstrides[1] = {D};
    const uint32_t pbox[2] = {static_cast<uint32_t>(D), 64};
    amap = encode_tiled(c.k_a, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, pdims, pstrides, pbox,
                        CU_TENSOR_MAP_SWIZZLE_NONE, promo);
    bmap = encode_tiled(c.k_b, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, pdims, pstrides, pbox,
                        CU_TENSOR_MAP_SWIZZLE_NONE, promo);
    const uint64_t sdims[2] = {64, rows / 64}, sstrides[1] = {128};
    const uint32_t sbox[2] = {64, 1};
    smap = encode_tiled(c.k_scale, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, sdims, sstrides, sbox,
                        CU_TENSOR_MAP_SWIZZLE_NONE, promo);
    if (ring && c.v8) {
      // v8: V's planes as the K planes' boxes, swizzled for the ring's ldmatrix (128-byte rows
      // at D 128, 64-byte rows at D 64).
      const CUtensorMapSwizzle swz =
          D == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
      vmap =
          encode_tiled(c.v_a, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, pdims, pstrides, pbox, swz, promo);
      vbmap =
          encode_tiled(c.v_b, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, pdims, pstrides, pbox, swz, promo);
    } else if (ring) {
      const uint64_t vdims[2] = {D, rows}, vstrides[1] = {D * 2};
      const uint32_t vbox[2] = {64, 64};
      vmap = encode_tiled_16bit(c.v, 2, vdims, vstrides, vbox, CU_TENSOR_MAP_SWIZZLE_128B, promo);
    }
  }
  // Pass 0: every group.
  if (ring) {
    // Where the items (the capacity's) number at least four times the blocks resident at once
    // (default), that many blocks, each fetching items with keys from a counter (graphed and
    // interleaved on the H200, notes/decode.md section 27: -6.1% at D 64 B32 L16K, -2.8% at
    // G 16, +-0.4% at G 4 / 8 with 2,048-8,192 items); between one and four waves, fewer
    // fetching blocks that take equal shares (below, section 28); within one wave one block
    // per item.
    // FOLD_DECODE_RING_BLOCKS=0: one block per item; =N > 0: at most N blocks (tests: several
    // items per block on a small cache). Scheduling only: no value depends on it.
    const int64_t items = static_cast<int64_t>(w.splits) * c.n_kv_heads * c.batch;
    // (The counter ends at items + the grid: every block's last fetch overshoots once.)
    if (items > INT32_MAX / 2)
      fail(FOLD_ERR_UNSUPPORTED, "decode: batch x KV heads x splits exceeds 2^30");
    // Fetching blocks also hold the requests' first items (batch + 1 ints: up to 4 KB, so only
    // up to 1,024 requests, and only where it costs no resident block; else one block per item).
    const size_t smem_fetch = smem_ring + static_cast<size_t>(c.batch + 1) * 4;
    int64_t blocks = items;
    const int64_t r = fetch_resident(split_ring, smem_ring, c.batch);
    if (r > 0) {
      if (items >= 4 * r) {
        blocks = r;
      } else if (items > r) {
        // A little over one wave (B1 L32K: 520 items, 396 resident blocks, so a second wave of
        // 124 blocks, one per SM, that streams at a fraction of the bandwidth): as many blocks as
        // take equal shares in the fewest waves, each fetching ceil(items / r) items (session 20,
        // graphed and interleaved: B1 L32K 74.0 -> 68.1 us, B2 L32K -3.1%, B4 L16K -1.9%, B8 L8K
        // -1.1%; the resident count itself was no better than one block per item).
        const int64_t per_block = (items + r - 1) / r;
        blocks = (items + per_block - 1) / per_block;
      }
      if (const char *v = std::getenv("FOLD_DECODE_RING_BLOCKS"); v != nullptr && *v != '\0') {
        char *end = nullptr;
        const long long n = std::strtoll(v, &end, 10);
        if (*end == '\0' && n >= 0) blocks = n == 0 ? items : n;  // (anything else: the default)
      }
      blocks = std::min(items, blocks);
    }
    launch_k(split_ring, dim3(static_cast<unsigned>(blocks)), dim3(kRingThreads),
             blocks < items ? smem_fetch : smem_ring, stream, pdl,
             "decode_split_ring_kernel launch", vmap, vbmap, amap, bmap, smap, c, p, ws, 0, stats,
             env_on("FOLD_DECODE_RING_FULL") ? 1 : 0, lengths, early, p.window_before);
  } else if (screen)
    launch_k(split_screen, split_grid, dim3(kRingThreads), smem_screen, stream, pdl,
             "decode_split_screen_kernel launch", amap, smap, c, p, ws, 0, stats);
  else if (split2)
    launch_k(split2_k, win_grid, dim3(kThreads), smem2, stream, pdl, "decode_split2_kernel launch",
             c, p, ws, stats, lengths);
  else
    launch_k(split, win_grid, dim3(kThreads), smem, stream, pdl, "decode_split_kernel launch", c, p,
             ws, out, lse, 0, stats, 0);
  // Pass 0's combine (the guard's flags).
  if (ept2)
    launch_k(combine2, cgrid2, dim3(kThreads), combine_smem2, stream, pdl,
             "decode_combine2_kernel launch", c, p, ws, out, lse);
  else
    launch_k(combine1, cgrid, dim3(kThreads), combine_smem, stream, pdl,
             "decode_combine_kernel launch", c, p, ws, out, lse);
  // Pass 1: the groups the guard flagged, from its list, by the plain split (whatever pass 0
  // ran: one kernel for every pass-1 group, so its bits do not depend on the batch) and its
  // last-block combine, on a grid of a fixed size: a function of the cache's shape only.
  const int64_t items = static_cast<int64_t>(groups) * w.splits;
  const int k_list =
      static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(items, 2 * sm_count())));
  launch_k(split_list, dim3(k_list), dim3(kThreads), smem_list, stream, pdl,
           "decode_split_kernel launch", c, p, ws, out, lse, 1, stats, appended ? 1 : 0);
}

}  // namespace fold::cuda
