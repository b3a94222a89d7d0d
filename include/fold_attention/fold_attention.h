/*
 * FoldAttention C ABI.
 *
 * Every entry point takes raw pointers, shapes and strides (in elements), and returns a
 * fold_status_t. On failure, fold_last_error() returns a message naming the offending
 * argument; the message is thread-local and stays valid until the next call on the same
 * thread. No entry point allocates device memory behind the caller's back: callers pass
 * outputs and workspaces (the Python package allocates them through torch).
 *
 * Layouts (self-attention; queries and keys share lengths):
 *   q, out, dout, dq : per request, [tokens, n_heads,    head_dim]
 *   k, v, dk, dv     : per request, [tokens, n_kv_heads, head_dim]
 *   lse, delta       : float32 [n_heads, total_tokens]   (natural-log LSE, as FlashAttention)
 *   bounds           : float32 [batch, n_kv_heads, FOLD_BWD_BOUNDS]
 * A dense batch (cu_seqlens == NULL) has `batch` requests of `seqlen` tokens, request b at
 * element offset b * batch_stride. A packed batch (cu_seqlens != NULL) has request b at
 * tokens [cu_seqlens[b], cu_seqlens[b+1]), element offset cu_seqlens[b] * token_stride.
 * The last dimension is always contiguous. Token index t of the packed form is the dense
 * index b * seqlen + t, which is what lse/delta use in both cases.
 *
 * Pointers of CUDA entry points are device pointers (cu_seqlens included); those of CPU
 * entry points are host pointers. `stream` is a cudaStream_t (NULL: the legacy stream).
 * A CUDA entry point runs on the current device (cudaSetDevice): its device pointers must be
 * memory of that device (or managed, or host memory mapped for it) and its stream that
 * device's; pageable host memory, another device's memory or stream give
 * FOLD_ERR_INVALID_ARGUMENT naming the argument (the decode entry points of decode.h too).
 */
#ifndef FOLD_ATTENTION_H_
#define FOLD_ATTENTION_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define FOLD_API __declspec(dllexport)
#else
#define FOLD_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define FOLD_ATTENTION_VERSION_MAJOR 0
#define FOLD_ATTENTION_VERSION_MINOR 1
#define FOLD_ATTENTION_VERSION_PATCH 0

/* Largest head dimension any path accepts. */
#define FOLD_MAX_HEAD_DIM 256

/* Per (request, KV head) bounds written by the backward preprocess, in this order. */
#define FOLD_BWD_BOUNDS 4
#define FOLD_BOUND_MAX_ABS_K 0     /* max |K|                                  */
#define FOLD_BOUND_MAX_ABS_V 1     /* max |V|                                  */
#define FOLD_BOUND_MAX_DO_NORM 2   /* max ||dO_i|| over the group's rows       */
#define FOLD_BOUND_MAX_ABS_DELTA 3 /* max |Delta_i| over the group's rows      */

typedef enum fold_status {
  FOLD_OK = 0,
  FOLD_ERR_INVALID_ARGUMENT = 1, /* bad shape, stride, dtype, pointer or value        */
  FOLD_ERR_UNSUPPORTED = 2,      /* valid request that this build or path cannot run  */
  FOLD_ERR_NO_CUDA = 3,          /* a CUDA entry point in a library built without it  */
  FOLD_ERR_CUDA = 4,             /* a CUDA runtime error (the message has its text)   */
  FOLD_ERR_INTERNAL = 5
} fold_status_t;

typedef enum fold_dtype {
  FOLD_DTYPE_F32 = 0,
  FOLD_DTYPE_F16 = 1,
  FOLD_DTYPE_BF16 = 2
} fold_dtype_t;

/* A [*, heads, head_dim] view with a contiguous last dimension. Strides in elements; data aligned
 * to the element size. The training entry points check their views (and lse / delta) for NULL,
 * alignment and an extent inside the address space, and that the arrays they write do not
 * overlap each other (decode's checks: decode.h). An output must not overlap any input either:
 * that is not checked (inputs may legitimately share storage with each other), and an output
 * written over an input gives undefined results. */
typedef struct fold_tensor {
  void *data;
  int64_t batch_stride; /* dense only: elements between consecutive requests     */
  int64_t token_stride; /* elements between consecutive tokens of one request     */
  int64_t head_stride;  /* elements between consecutive heads of one token        */
} fold_tensor_t;

/* The shape and options of one self-attention call. */
typedef struct fold_attn_problem {
  int32_t batch;             /* requests, >= 1                                       */
  int32_t seqlen;            /* dense: tokens per request. varlen: longest request   */
  const int32_t *cu_seqlens; /* NULL: dense. Else batch + 1 non-decreasing offsets   */
  int64_t total_tokens;      /* dense: batch * seqlen. varlen: cu_seqlens[batch]     */
  int32_t n_heads;           /* query heads                                          */
  int32_t n_kv_heads;        /* key/value heads; n_heads % n_kv_heads == 0           */
  int32_t head_dim;          /* 1..FOLD_MAX_HEAD_DIM (CUDA: 64, 96, 128 or 256)     */
  int32_t dtype;             /* fold_dtype_t of q, k, v, out, dout, dq, dk, dv       */
  int32_t causal;            /* 0 or 1; causal masks key j > query i                 */
  float softmax_scale;       /* finite, > 0                                          */
  /* Sliding window (local attention); 0 (a zero-initialised problem): unbounded.
   * window_before = w > 0: query i sees key j only if i - j < w (w keys ending at its own
   * position: HF's sliding_window; FlashAttention's window_size[0] is w - 1).
   * window_after  = w > 0: query i sees key j only if j - i < w (window_size[1] + 1).
   * Every query sees its own key, so no row is ever empty. The CPU reference and the CUDA
   * kernels take any window. */
  int32_t window_before;
  int32_t window_after;
  /* Attention sinks (gpt-oss): NULL, or n_heads float32 logits in the scaled-score space
   * (natural log, like softmax_scale * q.k), on the tensors' device. Head h's sink takes
   * softmax mass exp(sinks[h]) in every row's denominator and gives no value: out_i =
   * sum_j exp(s_ij) v_j / (sum_j exp(s_ij) + exp(sinks[h])), and the LSE includes it. The
   * forward reads it; the backward takes the forward's LSE (the sink's mass included) and
   * reads no sink: dq, dk, dv follow, and d sinks[h] = -sum_i exp(sinks[h] - lse_i) Delta_i
   * (Delta from the preprocess) is the caller's. CUDA: the default forward and its v0
   * fallback take them; FOLD_FWD_VARIANT v1 / v1.1 / v1.2-2wg and FOLD_FWD_EPI=stg (A/B
   * settings) refuse them (FOLD_ERR_UNSUPPORTED). */
  const float *sinks;
} fold_attn_problem_t;

/* ---- library ----------------------------------------------------------------------- */
FOLD_API const char *fold_version(void);
FOLD_API const char *fold_last_error(void);
/* 1 if CUDA entry points are compiled in, else 0 (they then return FOLD_ERR_NO_CUDA). */
FOLD_API int fold_built_with_cuda(void);
/* Checks a problem description (shapes, options, host-side cu_seqlens when host != 0). */
FOLD_API fold_status_t fold_check_problem(const fold_attn_problem_t *p, int host_cu_seqlens);

/* ---- training, CPU reference backend ------------------------------------------------ */
FOLD_API fold_status_t fold_fwd_cpu(const fold_attn_problem_t *p, fold_tensor_t q, fold_tensor_t k,
                                    fold_tensor_t v, fold_tensor_t out, float *lse);

/* Delta_i = dO_i . O_i, and the bounds of the integer grid (ALGORITHMS.md section 5). */
FOLD_API fold_status_t fold_bwd_preprocess_cpu(const fold_attn_problem_t *p, fold_tensor_t k,
                                               fold_tensor_t v, fold_tensor_t out,
                                               fold_tensor_t dout, float *delta, float *bounds);

/* Deterministic backward: preprocess, integer-grid dQ, fixed-order dK/dV. */
FOLD_API fold_status_t fold_bwd_cpu(const fold_attn_problem_t *p, fold_tensor_t q, fold_tensor_t k,
                                    fold_tensor_t v, fold_tensor_t out, fold_tensor_t dout,
                                    const float *lse, fold_tensor_t dq, fold_tensor_t dk,
                                    fold_tensor_t dv);

/* ---- training, CUDA (sm_90a) -------------------------------------------------------- */
/* Same results as fold_bwd_preprocess_cpu, bit for bit. `bounds` is overwritten. */
FOLD_API fold_status_t fold_bwd_preprocess_cuda(const fold_attn_problem_t *p, fold_tensor_t k,
                                                fold_tensor_t v, fold_tensor_t out,
                                                fold_tensor_t dout, float *delta, float *bounds,
                                                void *stream);

/* Training forward on the GPU: out and the natural-log LSE (float32 [n_heads, total_tokens]),
 * as fold_fwd_cpu computes them (bits may differ from the CPU; they never depend on the
 * batch around a request nor on its offset in a packed batch). bf16/fp16, head_dim 64, 96,
 * 128 or 256 (others: FOLD_ERR_UNSUPPORTED). */
FOLD_API fold_status_t fold_fwd_cuda(const fold_attn_problem_t *p, fold_tensor_t q, fold_tensor_t k,
                                     fold_tensor_t v, fold_tensor_t out, float *lse, void *stream);

/* fold_fwd_cuda (the same out and lse, bit for bit) that also writes kv_bounds, float32
 * [batch, n_kv_heads, FOLD_BWD_BOUNDS]: max|K| and max|V| of each (request, KV head) in the
 * slots FOLD_BOUND_MAX_ABS_K / _V, exactly as fold_bwd_preprocess_cuda computes them, and 0 in
 * the other slots. For a training step: handed to fold_bwd_cuda_kv_bounds with the same k and
 * v, they spare the backward its own read of K and V. As for the forward itself, every
 * request's length must be <= p->seqlen (longer requests are not fully scanned). */
FOLD_API fold_status_t fold_fwd_cuda_kv_bounds(const fold_attn_problem_t *p, fold_tensor_t q,
                                               fold_tensor_t k, fold_tensor_t v, fold_tensor_t out,
                                               float *lse, float *kv_bounds, void *stream);

/* Bytes of device workspace fold_bwd_cuda needs for problem p: Delta [n_heads, total_tokens]
 * float32, bounds [batch, n_kv_heads, FOLD_BWD_BOUNDS] float32 and the int32 dQ grid
 * [total_tokens, n_heads, head_dim]. 0 when p is NULL. */
FOLD_API size_t fold_bwd_cuda_workspace_size(const fold_attn_problem_t *p);

/* Deterministic backward on the GPU (preprocess, integer-grid dQ, fixed-order dK/dV): the
 * gradients are bit-identical across repeats, batch composition and packing. `workspace`
 * (device memory, 16-byte aligned, at least fold_bwd_cuda_workspace_size(p) bytes) is
 * zeroed where needed on `stream`; no host synchronisation, no allocation (graph-capturable). */
FOLD_API fold_status_t fold_bwd_cuda(const fold_attn_problem_t *p, fold_tensor_t q, fold_tensor_t k,
                                     fold_tensor_t v, fold_tensor_t out, fold_tensor_t dout,
                                     const float *lse, fold_tensor_t dq, fold_tensor_t dk,
                                     fold_tensor_t dv, void *workspace, size_t workspace_bytes,
                                     void *stream);

/* fold_bwd_cuda, given the kv_bounds fold_fwd_cuda_kv_bounds wrote for the same problem, k and
 * v (unchanged since): the same gradients bit for bit, without the preprocess's read of K and
 * V. kv_bounds NULL: exactly fold_bwd_cuda. Bounds of other tensors break the grid's overflow
 * guarantee (ALGORITHMS.md section 5): the caller owns that pairing. */
FOLD_API fold_status_t fold_bwd_cuda_kv_bounds(const fold_attn_problem_t *p, fold_tensor_t q,
                                               fold_tensor_t k, fold_tensor_t v, fold_tensor_t out,
                                               fold_tensor_t dout, const float *lse,
                                               fold_tensor_t dq, fold_tensor_t dk, fold_tensor_t dv,
                                               const float *kv_bounds, void *workspace,
                                               size_t workspace_bytes, void *stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FOLD_ATTENTION_H_ */
