/*
 * FoldAttention decode C ABI: a paged, quantised KV cache and one decode step over it.
 * Conventions as in fold_attention.h (status codes, fold_last_error(), strides in
 * elements, the caller owns every buffer). notes/decode.md is the specification.
 *
 * The cache of one layer lives in caller-owned arrays described by fold_kvcache_t:
 *   k_a, k_b   int8   [num_pages, n_kv_heads, page_size, head_dim]  Hadamard-rotated K planes
 *   k_scale    uint16 [num_pages, n_kv_heads, page_size]            bf16 bits, one per key
 *   v          dtype  [num_pages, n_kv_heads, page_size, head_dim]  (v8 == 0)
 *   v_a, v_b   uint8  [num_pages, n_kv_heads, page_size, head_dim]  E4M3 planes (v8 == 1)
 *   v_exp      int32  [batch, n_kv_heads]                           v8: V scale 2^v_exp
 *   v_page_sum float  [num_pages, n_kv_heads, head_dim]             sum of V over each page's
 * tokens heavy_keys int32  [batch, n_kv_heads, FOLD_DECODE_HEAVY_KEYS]   keys with the largest K
 *                                                                   scales (-1: none yet)
 *   page_table int32  [batch, pages_per_request]                    pool page of each page
 *   lengths    int32  [batch]                                       tokens; -1: free slot
 * Token t of request b is row t % page_size of page page_table[b][t / page_size]. The
 * caller assigns pages (a free list) before a write reaches them; entries beyond a
 * request's length are never read.
 *
 * A cache whose every step takes a sliding window of at most w keys (pinned_window = w > 0:
 * window_before in [1, w]) keeps no state about a request's keys before kept(L) = page_size *
 * floor(max(0, L - w) / page_size) (L: its length): its heavy-key list drops them (before key t is
 * inserted, the entries below kept(t) leave the list, the rest keep their order) and a v8 re-scale
 * re-quantises keys from kept(L) on. No call reads a page below kept(L) / page_size then, so the
 * caller may release those pages (page_table entries set to -1, the pages reused by other
 * requests). (pinned_window was added after version 0.1.0's first release: a caller that fills the
 * struct field by field must zero-initialise it, e.g. `fold_kvcache_t c{}` or memset.)
 */
#ifndef FOLD_ATTENTION_DECODE_H_
#define FOLD_ATTENTION_DECODE_H_

#include "fold_attention/fold_attention.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Keys per decode split (fixed: a request's bits never depend on its batch). */
#define FOLD_DECODE_SPLIT_KEYS 512
/* Keys per request and KV head that the reference sample always scores (largest scales). */
#define FOLD_DECODE_HEAVY_KEYS 8
/* v8: marker of a request/head whose V exponent is not chosen yet. */
#define FOLD_DECODE_V_EXP_UNSET (-1000)

typedef struct fold_kvcache {
  int32_t batch;             /* request slots, >= 1                                 */
  int32_t n_kv_heads;        /* >= 1                                                */
  int32_t head_dim;          /* 64, 128 or 256                                      */
  int32_t page_size;         /* a positive multiple of 64                           */
  int32_t max_len;           /* tokens per request, >= 1                            */
  int32_t pages_per_request; /* columns of page_table: ceil(max_len / page_size)    */
  int32_t num_pages;         /* pages in the pool                                   */
  int32_t dtype;             /* FOLD_DTYPE_BF16 or FOLD_DTYPE_F16: q, k, v, out, V  */
  int32_t v8;                /* 0: V stored in dtype; 1: two E4M3 planes             */
  int32_t v_exp_fixed;       /* v8: 1 if v_exp is user-given (never re-scaled)       */
  int8_t *k_a;
  int8_t *k_b;
  uint16_t *k_scale;
  void *v;
  uint8_t *v_a;
  uint8_t *v_b;
  int32_t *v_exp;
  float *v_page_sum;
  int32_t *heavy_keys;
  int32_t *page_table;
  int32_t *lengths;
  int32_t pinned_window; /* 0, or the widest window_before a step may take (above) */
} fold_kvcache_t;

typedef struct fold_decode_params {
  int32_t n_heads;       /* query heads: a multiple of n_kv_heads, group size <= 64    */
  float softmax_scale;   /* finite, > 0                                               */
  int32_t dense;         /* 1: every key live and refined (depth ignored)             */
  float depth;           /* binades below Z a key may fall and stay live, > 0; where  */
                         /* the screen does not pay (bf16/fp16 V, G > 8 at D 128,     */
                         /* G > 4 at D 64) the step runs as dense = 1 instead         */
                         /* (FOLD_DECODE_SCREEN=1 in the environment: never)          */
  float refine_band;     /* plane B of K read within this many binades of Z, >= 0     */
  float v_refine_band;   /* v8: plane B of V read within this many binades of Z, >= 0 */
  int32_t window_before; /* 0: the step's query sees every key of its request; w > 0:  */
                         /* only keys j with L - 1 - j < w (L: the request's length     */
                         /* after the append; FlashAttention's window_size left = w - 1) */
  const float *sinks;    /* NULL, or n_heads float32 logits, one per query head (finite */
                         /* or -inf; host memory for the CPU step, device memory for   */
                         /* the CUDA step, whose values are not checked): exp(sinks[h]) */
                         /* joins row h's denominator, with no value (gpt-oss)           */
} fold_decode_params_t;

/* What one decode step read. Keys count (request, KV head, key) triples. */
typedef struct fold_decode_stats {
  int64_t keys;
  int64_t live_keys;     /* V gathered                                   */
  int64_t refine_keys;   /* plane B of K gathered                        */
  int64_t v_refine_keys; /* v8: plane B of V gathered                    */
  int64_t rows;          /* query rows attended                          */
  int64_t fixup_rows;    /* rows whose reference left the guard window   */
  double bytes_read;     /* cache bytes a kernel would read (screen included) */
} fold_decode_stats_t;

/* Appends n_tokens tokens to request `request` (lengths[request] >= 0) from k, v:
 * [n_tokens, n_kv_heads, head_dim] of cache->dtype (token_stride, head_stride used):
 * quantises, updates v_page_sum (and v_exp, re-scaling the request's planes if a value would
 * exceed E4M3), and advances lengths[request]. Nothing is written if any check fails. */
FOLD_API fold_status_t fold_kvcache_append_cpu(const fold_kvcache_t *cache, int32_t request,
                                               int32_t n_tokens, fold_tensor_t k, fold_tensor_t v);

/* One decode step. If k_step.data != NULL, first appends k_step/v_step ([batch, n_kv_heads,
 * head_dim], batch_stride and head_stride used) to every active request (lengths >= 0).
 * Then attends q ([batch, n_heads, head_dim]) over each active request and writes out
 * (same layout; free slots get zeros) and, if lse != NULL, the natural-log LSE float32
 * [batch, n_heads] (-inf for free or empty slots). stats may be NULL. out and lse must not
 * overlap each other, q, k_step, v_step or the cache (not checked). */
FOLD_API fold_status_t fold_decode_cpu(const fold_kvcache_t *cache,
                                       const fold_decode_params_t *params, fold_tensor_t q,
                                       fold_tensor_t k_step, fold_tensor_t v_step,
                                       fold_tensor_t out, float *lse, fold_decode_stats_t *stats);

/* ---- CUDA ----------------------------------------------------------------------------
 * The cache arrays (lengths and page_table included) live on the device. Nothing is read
 * back to the host and nothing is allocated: every call only enqueues kernels on `stream`
 * (a cudaStream_t; NULL: the legacy default stream), so a step can be captured in a CUDA
 * graph. The host checks the descriptors; the device data is not checked (non-finite
 * values, a full request, missing pages, a v8 value beyond a fixed v_scale): the caller
 * (e.g. the Python FoldKVCache, which keeps the same checks as the CPU path) must; a step
 * token with no room or no reserved page is not written but counted
 * (FOLD_DECODE_STAT_REJECTED). The kernels' planes, Z, verdicts and outputs equal the CPU
 * reference's bit for bit. */

/* Device counters written by fold_decode_cuda (int64 each, zeroed by the call): */
#define FOLD_DECODE_CUDA_STATS 8
#define FOLD_DECODE_STAT_KEYS 0
#define FOLD_DECODE_STAT_LIVE 1
#define FOLD_DECODE_STAT_REFINE 2
#define FOLD_DECODE_STAT_V_REFINE 3
#define FOLD_DECODE_STAT_ROWS 4
#define FOLD_DECODE_STAT_FIXUP_ROWS 5
#define FOLD_DECODE_STAT_BYTES 6 /* bytes_read of fold_decode_stats_t, as an integer */
/* Requests whose step token was not appended: no room (length == max_len) or no reserved
 * page. fold_decode_cuda checks nothing on the host (it may run inside a CUDA graph); such a
 * request is attended without the token, and counted here. */
#define FOLD_DECODE_STAT_REJECTED 7

/* Bytes of device workspace fold_decode_cuda needs for this cache and n_heads; 0 (with
 * fold_last_error set) for a cache or head count fold_decode_cuda would reject. */
FOLD_API size_t fold_decode_cuda_workspace_size(const fold_kvcache_t *cache, int32_t n_heads);

/* fold_kvcache_append_cpu on the device (the request must be active with room and pages
 * for the tokens: not checked on the device). */
FOLD_API fold_status_t fold_kvcache_append_cuda(const fold_kvcache_t *cache, int32_t request,
                                                int32_t n_tokens, fold_tensor_t k, fold_tensor_t v,
                                                void *stream);

/* fold_decode_cpu on the device. q, k_step, v_step, out, lse are device pointers; stats is
 * NULL or FOLD_DECODE_CUDA_STATS device int64 counters; workspace holds at least
 * fold_decode_cuda_workspace_size bytes (256-byte aligned; it may be uninitialised: each call
 * resets what it uses, and one workspace must not serve two calls in flight at once). The
 * cache's k_a, k_b, k_scale and value arrays (v, or v_a / v_b) must be 16-byte aligned on CUDA
 * (16-byte copies; else FOLD_ERR_UNSUPPORTED). The range guard runs in-stream (flagged groups are
 * recomputed by kernels that are always launched). */
FOLD_API fold_status_t fold_decode_cuda(const fold_kvcache_t *cache,
                                        const fold_decode_params_t *params, fold_tensor_t q,
                                        fold_tensor_t k_step, fold_tensor_t v_step,
                                        fold_tensor_t out, float *lse, int64_t *stats,
                                        void *workspace, size_t workspace_bytes, void *stream);

/* The host checks of an eager step before fold_decode_cuda, in one read of the device: copies
 * the cache's lengths [0 .. batch) into lengths_out (host memory) and sets *nonfinite (host) to a
 * bit mask: 1 if q (device, n_heads rows per request) holds an inf or NaN, 2 if k_step, 4 if
 * v_step does in the row of a request whose length is >= 0 (k_step / v_step: data NULL when no
 * token is appended), and 8 if such a k_step row holds a finite value of magnitude >=
 * 2^(127 - log2 head_dim) (bf16 only: its Hadamard rotation might overflow float32; the caller
 * then tests those rows exactly before appending them). Ordered on `stream`; returns once the
 * values are on the host (it waits for the stream, so it cannot be captured in a CUDA graph). */
FOLD_API fold_status_t fold_decode_cuda_precheck(const fold_kvcache_t *cache, int32_t n_heads,
                                                 fold_tensor_t q, fold_tensor_t k_step,
                                                 fold_tensor_t v_step, int32_t *lengths_out,
                                                 int32_t *nonfinite, void *stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FOLD_ATTENTION_DECODE_H_ */
