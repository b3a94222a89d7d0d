// CUDA decode: the cache writer, the front (Q planes, reference Z), the split decode, the
// combine and the in-stream guard (notes/decode.md is the spec, src/cpu/decode_*.cpp the
// reference). This file holds the host side (kernel choice and launch sequence); the kernels are
// in the headers it includes, in this order, inside its anonymous namespace (one translation
// unit, so the kernels compile as they did in one file):
//   decode_helpers.cuh      cache rows, 16-bit loads and stores, int8 dots, the window's first key
//   decode_append.cuh       the cache writer's kernels
//   decode_step_state.cuh   PDL, the workspace view, the guard's flag list, the statistics' slots
//   decode_front.cuh        q planes and the reference Z of each row
//   decode_split_parts.cuh  what the split kernels share: value products, key dots and weights
//   decode_split.cuh        the plain split kernel (pass 0 fallback and every pass 1)
//   decode_split2.cuh       the screened split with two key halves per thread
//   decode_ring.cuh         the dense split through a TMA ring
//   decode_screen.cuh       the opt-in screened ring
//   decode_combine.cuh      the combine, the guard's fix-up and pass 1's helpers, statistics
// scripts/sass_digest.py checks that a change which only moves code leaves every kernel's SASS
// as it was (this split was checked so: all kernels identical).
//
// v1 (notes/decode.md section 10): a parallel front, and split kernels that
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

// The kernels, in dependency order (clang-format would sort them).
// clang-format off
#include "cuda/decode_helpers.cuh"
#include "cuda/decode_append.cuh"
#include "cuda/decode_step_state.cuh"
#include "cuda/decode_front.cuh"
#include "cuda/decode_split_parts.cuh"
#include "cuda/decode_split.cuh"
#include "cuda/decode_split2.cuh"
#include "cuda/decode_ring.cuh"
#include "cuda/decode_screen.cuh"
#include "cuda/decode_combine.cuh"
// clang-format on

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
                            const int32_t *, const int, const int, const int);
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
template <bool WIN>
RingKernel ring_kernel_win(int D, int nrb, bool f16, int stages, bool v8) {
  // v8: bf16 weight operands whatever the queries' type (the bf16 guard window).
  if (v8)
    return D == 64 ? ring_kernel_rb<1, false, true, WIN>(nrb, stages)
                   : ring_kernel_rb<2, false, true, WIN>(nrb, stages);
  if (D == 64)
    return f16 ? ring_kernel_rb<1, true, false, WIN>(nrb, stages)
               : ring_kernel_rb<1, false, false, WIN>(nrb, stages);
  return f16 ? ring_kernel_rb<2, true, false, WIN>(nrb, stages)
             : ring_kernel_rb<2, false, false, WIN>(nrb, stages);
}
RingKernel ring_kernel(int D, int G, bool f16, int stages, bool v8, bool win) {
  const int nrb = (G + 7) / 8;
  return win ? ring_kernel_win<true>(D, nrb, f16, stages, v8)
             : ring_kernel_win<false>(D, nrb, f16, stages, v8);
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
  // the front's WIN forms (SMALL or not), for pass 0 the WIN instances of the dense ring (dense)
  // or split2 (screened, where it runs), else the plain split (split_item's WIN; the opt-in screen
  // ring takes no window), the EXT combines and pass 1. Sinks alone: the same front and pass-0
  // split as without them, the EXT combines and pass 1 (sinks act in the combine only).
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
  const bool ring = split_ring_supported(c, p);
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
  // Windowed steps take its WIN instances.
  Split2Plan plan2 = split2_plan(c, p, static_cast<int64_t>(win_splits) * groups, sm_count());
  plan2.pipe = plan2.pipe && !win;  // (windowed steps keep their instances)
  plan2.pair = plan2.pair && !win;
  const bool split2 = !ring && !screen && plan2.on;
  // OVERLAP: the front lets the dense ring or split2 start beside it; they issue their first loads
  // of the cache while the front computes Z and wait only before reading its output
  // (decode_split_ring_kernel, split2_item). FOLD_DECODE_OVERLAP=0 (read per call) turns it off,
  // for A/B runs (the front then triggers at its end; split2 keeps its loads before its wait,
  // which then overlap nothing); without PDL it does nothing. Scheduling only: the same bits.
  const int early = (ring || split2) && pdl && env_on("FOLD_DECODE_OVERLAP") ? 1 : 0;
  // L2PF (off unless FOLD_DECODE_L2PF=1, read per call): the dense ring and split2 ask L2 for
  // their split's rows at its start (l2_prefetch), meant for grids of at most one block per SM,
  // where a block's time is its chain of dependent loads. Measured (session 52, H100, graphed B1
  // attends): with PIPE it gains at most 0.3 us (D 64, L <= 2K) and costs 0.5-8 us elsewhere
  // (D 128, L 4K-16K, B4: the prefetch's reads slow the front beside it), so it is not a default.
  // Scheduling only: the same bits (FOLD_DECODE_L2PF=1 / 0 in the bit test).
  const int l2pf = env_tristate("FOLD_DECODE_L2PF") == 1 ? 1 : 0;
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
  const size_t smem2 =
      split2 ? split2_smem_bytes(G, c.head_dim, plan2.sa, plan2.pipe, plan2.pair) : 0;
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
             env_on("FOLD_DECODE_RING_FULL") ? 1 : 0, lengths, early, p.window_before, l2pf);
  } else if (screen)
    launch_k(split_screen, split_grid, dim3(kRingThreads), smem_screen, stream, pdl,
             "decode_split_screen_kernel launch", amap, smap, c, p, ws, 0, stats);
  else if (split2)
    launch_k(split2_k, win_grid, dim3(plan2.pair ? 2 * kThreads : kThreads), smem2, stream, pdl,
             "decode_split2_kernel launch", c, p, ws, stats, lengths, l2pf);
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
