// Host-side launchers of the CUDA kernels, called by the C entry points after validation.
// In a build without CUDA, each throws FOLD_ERR_NO_CUDA ("built without CUDA").
#pragma once

#include <cstddef>
#include <cstdint>

#include "fold_attention/decode.h"
#include "fold_attention/fold_attention.h"

namespace fold::cuda {

// Head dimensions the CUDA training kernels are compiled for.
inline bool training_head_dim_supported(int head_dim) {
  return head_dim == 64 || head_dim == 96 || head_dim == 128 || head_dim == 256;
}

// The backward's workspace, carved from one caller-provided buffer (256-byte aligned parts):
//   delta   float32 [n_heads, total_tokens]
//   bounds  float32 [batch, n_kv_heads, FOLD_BWD_BOUNDS]
//   dq_grid int32   [total_tokens, n_heads, head_dim]
struct BackwardWorkspace {
  float *delta;
  float *bounds;
  int32_t *dq_grid;
  size_t total_bytes;
};

inline size_t align256(size_t n) { return (n + 255) / 256 * 256; }

// The bytes of one [batch, n_kv_heads, FOLD_BWD_BOUNDS] float32 bounds array (the backward's, or
// the K / V bounds a training forward takes).
inline size_t bounds_bytes(const fold_attn_problem_t &p) {
  return static_cast<size_t>(p.batch) * p.n_kv_heads * FOLD_BWD_BOUNDS * sizeof(float);
}

inline BackwardWorkspace backward_workspace(const fold_attn_problem_t &p, void *base) {
  const size_t delta_bytes =
      align256(static_cast<size_t>(p.n_heads) * static_cast<size_t>(p.total_tokens) * 4);
  const size_t bounds_part = align256(bounds_bytes(p));
  const size_t grid_bytes = static_cast<size_t>(p.total_tokens) * p.n_heads * p.head_dim * 4;
  BackwardWorkspace ws{nullptr, nullptr, nullptr, delta_bytes + bounds_part + align256(grid_bytes)};
  if (base != nullptr) {  // (no pointer arithmetic on NULL when only the size is asked)
    char *c = static_cast<char *>(base);
    ws.delta = reinterpret_cast<float *>(c);
    ws.bounds = reinterpret_cast<float *>(c + delta_bytes);
    ws.dq_grid = reinterpret_cast<int32_t *>(c + delta_bytes + bounds_part);
  }
  return ws;
}

// dq_grid: when not null, the rows of every request's tokens are zeroed on the way (the
// backward's grid); null for the preprocess alone. kv_bounds: when not null, the K / V bounds
// of the same k and v (launch_kv_bounds or the forward's), copied into bounds instead of read
// again from k and v; same bits.
void launch_bwd_preprocess(const fold_attn_problem_t &p, fold_tensor_t k, fold_tensor_t v,
                           fold_tensor_t out, fold_tensor_t dout, float *delta, float *bounds,
                           int32_t *dq_grid, const float *kv_bounds, void *stream);

// kv_bounds [batch, n_kv_heads, FOLD_BWD_BOUNDS] float32: max|K| and max|V| in their slots as
// the preprocess computes them, zeros in the others (bwd_preprocess.cu's K / V blocks alone).
void launch_kv_bounds(const fold_attn_problem_t &p, fold_tensor_t k, fold_tensor_t v,
                      float *kv_bounds, void *stream);

// v1 (wgmma + TMA, warp-specialised) for every view TMA can describe, else v0 (mma.sync);
// the choice depends on the views' layouts only (forward.cu). kv_bounds, when not null, gets
// launch_kv_bounds's values (taken by the v1.2 kernel's idle producer warps, else by
// launch_kv_bounds after the forward).
void launch_forward(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k, fold_tensor_t v,
                    fold_tensor_t out, float *lse, float *kv_bounds, void *stream);
void launch_forward_v0(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k,
                       fold_tensor_t v, fold_tensor_t out, float *lse, void *stream);

// The v1 main kernel of the backward (backward_sm90.cu, wgmma): returns false, launching
// nothing, for a head_dim it does not cover (the caller then runs v0's).
bool launch_backward_main_sm90(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k,
                               fold_tensor_t v, fold_tensor_t dout, const float *lse,
                               const float *delta, const float *bounds, int32_t *dq_grid,
                               fold_tensor_t dk, fold_tensor_t dv, void *stream);

// Runs preprocess, main kernel and postprocess on `stream`; `workspace` holds at least
// backward_workspace(p, nullptr).total_bytes bytes.
// kv_bounds: null, or the forward's launch_kv_bounds values of the same k and v (the
// preprocess then skips its read of k and v).
void launch_backward(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k,
                     fold_tensor_t v, fold_tensor_t out, fold_tensor_t dout, const float *lse,
                     fold_tensor_t dq, fold_tensor_t dk, fold_tensor_t dv, const float *kv_bounds,
                     void *workspace, void *stream);

// The decode's workspace (fold_decode_cuda), carved from one caller-provided buffer
// (256-byte aligned parts); rows = batch * n_heads, splits = ceil(max_len / 512):
//   qa, qb  int8    [rows, head_dim]        the step's query planes
//   sq, z   float32 [rows]                  query scale, reference Z (after the guard)
//   bad     int32   [rows]                  guard: row outside the window in pass 0
//   part_n  float32 [rows, splits, head_dim] split numerators
//   part_t, part_tl float32 [rows, splits]  split denominators (rounded / unrounded weights)
//   flag    int32   [batch, n_kv_heads]     guard: group recomputed in pass 1
//   gcnt    int64   [batch, n_kv_heads, 5]  pass-0 read counters
//   newlen  int32   [batch]                 the step's append: each request's length after it
//                                           (the front publishes it; the append's blocks all
//                                           read the old length meanwhile)
//   rej     int32   [batch]                 the step's append: 1 where the token was rejected
//   nflag   int32                           guard: groups flagged this step
//   p1done  int32   [batch, n_kv_heads]     pass-1 split blocks done (the last combines)
//   ring_next int32                         the dense ring's next item (blocks fetch items)
//   flist   int32   [batch * n_kv_heads]    guard: the flagged groups, pass 1's work list
// Nothing needs zeroing by the caller or by a memset: every counter is reset by the step's front
// (the kernel that runs before any of their writers; gcnt and p1done only for groups with keys,
// the only ones that use them), so the workspace may be uninitialised.
struct DecodeWorkspace {
  int8_t *qa, *qb;
  float *sq, *z;
  int32_t *bad;
  float *part_n, *part_t, *part_tl;
  int32_t *flag;
  int64_t *gcnt;
  float *e;  // [rows]: the coarse logit's error per unit of key scale (planes.h), by the front
  int32_t *newlen, *rej;
  int32_t *nflag;      // the number of groups the guard flagged this step
  int32_t *p1done;     // [B * Hkv]: pass-1 split blocks done
  int32_t *ring_next;  // the dense ring's item counter (decode_split_ring_kernel)
  int32_t *flist;  // [B * Hkv]: the flagged groups (b * Hkv + hk), in the order they were flagged
  int32_t splits;
  size_t total_bytes;
};

// total_bytes is 0 when the sizes overflow size_t (the entry points refuse such a cache).
inline DecodeWorkspace decode_workspace(const fold_kvcache_t &c, int n_heads, void *base) {
  const size_t rows = static_cast<size_t>(c.batch) * static_cast<size_t>(n_heads);
  const size_t D = static_cast<size_t>(c.head_dim);
  const int32_t splits = static_cast<int32_t>(
      (static_cast<int64_t>(c.max_len) + FOLD_DECODE_SPLIT_KEYS - 1) / FOLD_DECODE_SPLIT_KEYS);
  size_t part_n_bytes = 0;  // rows * splits * D * 4, the largest part
  if (__builtin_mul_overflow(rows, static_cast<size_t>(splits), &part_n_bytes) ||
      __builtin_mul_overflow(part_n_bytes, D * 4, &part_n_bytes) ||
      part_n_bytes > (~size_t{0} >> 2)) {
    DecodeWorkspace none{};
    return none;
  }
  const size_t groups = static_cast<size_t>(c.batch) * static_cast<size_t>(c.n_kv_heads);
  // gcnt, then newlen, rej, nflag, p1done, ring_next (int32)
  const size_t gcnt_bytes = groups * 5 * 8 + (2 * static_cast<size_t>(c.batch) + 2 + groups) * 4;
  const size_t sizes[12] = {
      align256(rows * D),          align256(rows * D),          align256(rows * 4),
      align256(rows * 4),          align256(rows * 4),          align256(rows * splits * D * 4),
      align256(rows * splits * 4), align256(rows * splits * 4), align256(groups * 4),
      align256(gcnt_bytes),        align256(groups * 4),        align256(rows * 4)};
  DecodeWorkspace w{};
  w.splits = splits;
  size_t off[12];
  size_t total = 0;
  for (int i = 0; i < 12; ++i) {
    off[i] = total;
    total += sizes[i];
  }
  w.total_bytes = total;
  if (base != nullptr) {
    char *c0 = static_cast<char *>(base);
    w.qa = reinterpret_cast<int8_t *>(c0 + off[0]);
    w.qb = reinterpret_cast<int8_t *>(c0 + off[1]);
    w.sq = reinterpret_cast<float *>(c0 + off[2]);
    w.z = reinterpret_cast<float *>(c0 + off[3]);
    w.bad = reinterpret_cast<int32_t *>(c0 + off[4]);
    w.part_n = reinterpret_cast<float *>(c0 + off[5]);
    w.part_t = reinterpret_cast<float *>(c0 + off[6]);
    w.part_tl = reinterpret_cast<float *>(c0 + off[7]);
    w.flag = reinterpret_cast<int32_t *>(c0 + off[8]);
    w.gcnt = reinterpret_cast<int64_t *>(c0 + off[9]);
    w.newlen = reinterpret_cast<int32_t *>(w.gcnt + groups * 5);
    w.rej = w.newlen + c.batch;
    w.nflag = w.rej + c.batch;
    w.p1done = w.nflag + 1;
    w.ring_next = w.p1done + groups;
    w.flist = reinterpret_cast<int32_t *>(c0 + off[10]);
    w.e = reinterpret_cast<float *>(c0 + off[11]);
  }
  return w;
}

// Cache writer: n_tokens rows of k, v (token_stride, head_stride) appended to `request`
// (device-side length). Two kernels (three for v8 V planes), no host read of device memory.
void launch_kvcache_append(const fold_kvcache_t &c, int32_t request, int32_t n_tokens,
                           fold_tensor_t k, fold_tensor_t v, void *stream);

// One decode step (optional one-token append per active request, front, splits, combine with
// the guard's fix-up, pass 1), all on `stream`; `workspace` holds
// decode_workspace(...).total_bytes; stats (FOLD_DECODE_CUDA_STATS int64 on the device) may be
// NULL.
void launch_decode(const fold_kvcache_t &c, const fold_decode_params_t &p, fold_tensor_t q,
                   fold_tensor_t k_step, fold_tensor_t v_step, fold_tensor_t out, float *lse,
                   int64_t *stats, void *workspace, void *stream);

// The eager step's host checks in one device read (decode_precheck.cu): cache lengths
// [0 .. batch) into lengths_out (host), and into *nonfinite (host) bit 0 if q holds a non-finite
// value, bit 1 if k_step, bit 2 if v_step does in a row of a request with a length >= 0 (k_step /
// v_step: data NULL when absent). Blocks until `stream` has run it.
void launch_decode_precheck(const fold_kvcache_t &c, int n_heads, fold_tensor_t q,
                            fold_tensor_t k_step, fold_tensor_t v_step, int32_t *lengths_out,
                            int32_t *nonfinite, void *stream);

}  // namespace fold::cuda
