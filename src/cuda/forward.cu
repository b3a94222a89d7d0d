// Training forward on the GPU, v1: FlashAttention-3 structure on sm_90a. wgmma (HGMMA) for
// both GEMMs, TMA loads through an mbarrier pipeline, warp specialisation and setmaxnreg.
//
// One CTA per (query block of 128 rows, head, request), 3 warpgroups (384 threads):
//   warpgroup 0, producer: gives its registers away (setmaxnreg.dec 24); one thread issues
//     the TMA loads: Q once, then K and V of every key block through kStages stages
//     (full barriers: the bytes landed; empty barriers: both consumers are done with it).
//   warpgroups 1, 2, consumers (setmaxnreg.inc 240): consumer c owns query rows
//     64c..64c+63 of the block. Per key block: S = Q K^T (SS wgmma, m64 n=block_n k16,
//     D/16 steps), mask, online softmax in base 2, P rounded to the dtype in registers,
//     O += P V (RS wgmma: A = P from registers, B = V MN-major, N = D (96 -> 128)).
// Shared tiles are 128B-swizzled panels of 64 columns (hopper/wgmma.cuh); D = 96 is held as
// 128 columns whose last 32 TMA fills with zeros (S skips them, P V computes zeros there).
//
// Semantics as v0 and the CPU reference (cpu/forward.cpp): s = (q . k) scale log2(e) in fp32,
// row max of the raw scores scaled afterwards (scale > 0), P = 2^(s scale log2 e - m) rounded
// to the input dtype for P V, l summed from the unrounded P, out = acc / l,
// lse = (m + log2 l) ln 2.
//
// Determinism and invariance: tiles start at the request's own first token (TMA row
// coordinate = request start + block offset); tile sizes and the block order come from
// forward_plan(D) and the request's own length; each row's keys are visited in ascending
// block order by one warpgroup with a fixed instruction sequence. Keys that a TMA box
// brings in past the request's end (the next packed request's tokens, or zeros past the
// tensor) get score -inf (P = 0 exactly) and, in the request's last block, their V rows are
// zeroed in shared memory before P V, so even non-finite values there contribute nothing.
// Query rows past the end are computed (rows are independent) but never stored. No split-KV,
// no atomics: out and lse of a request are the same bits alone, in any batch, at any
// packed offset, and across repeats.
//
// Sliding windows (core/window.h): v1.2 (and v0, forward_v0.cu); v1 and v1.1 refuse a window that
// masks anything. In separate kernel instances (kWindow), so that calls without one run the code
// of before. A tile the window cuts visits the key blocks the CPU reference visits (visible_keys,
// aligned to the request's start) and masks with window_mask.cuh's rule; a tile it does not cut
// runs the forms of before, the same instruction sequence (so a window that hides nothing from
// a request should give it the bits of no window: the GPU tests are to confirm it across the two
// instances). See forward_v12_kernel.
//
// Attention sinks (p.sinks, gpt-oss): v1.2 (and v0) in separate instances (kSinks), chosen from
// p.sinks != nullptr, so that calls without sinks run the code of before; v1, v1.1 and v1.2's A/B
// forms (FOLD_FWD_EPI=stg, FOLD_FWD_VARIANT=v1.2-2wg) refuse them. Each tile with rows reads its
// head's sink once and folds it into every row after the last key block, before out = acc / l and
// the LSE (add_sink, as the CPU reference's add_sink), so the LSE holds the sink's mass and the
// backward (which recomputes P from it) needs no change.
//
// Files: this one holds the configuration every version shares and the host side (variant
// choice, tile order, tensor maps, launches); the kernels are in the headers it includes inside
// its anonymous namespace (one translation unit): forward_v1.cuh, forward_softmax.cuh (the row
// arithmetic v1.1 and v1.2 share), forward_v11.cuh, forward_v12.cuh (the default).
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "core/problem.h"
#include "core/status.h"
#include "core/tile_plan.h"
#include "core/window.h"
#include "cuda/hopper/mbarrier.cuh"
#include "cuda/hopper/tma.cuh"
#include "cuda/hopper/warpgroup.cuh"
#include "cuda/hopper/wgmma.cuh"
#include "cuda/kv_bounds.cuh"
#include "cuda/launch.h"
#include "cuda/launch_setup.h"
#include "cuda/stage_rows.cuh"
#include "cuda/tensor_map.h"
#include "cuda/tile_mma.cuh"
#include "cuda/tile_order.cuh"
#include "cuda/window_mask.cuh"

namespace fold::cuda {

namespace {

namespace hw = hopper;
using tile::Bf16;
using tile::F16;
using tile::fast_exp2;
using tile::pack2;

constexpr int kThreads = 3 * hw::kWarpgroupThreads;
constexpr int kConsumerThreads = 2 * hw::kWarpgroupThreads;
constexpr int kProducerRegs = 24;
constexpr int kScanWarps = 3;       // the producer warps that take the K / V bounds (v1.2, kScan)
constexpr int kConsumerRegs = 240;  // 128 x 24 + 256 x 240 = 64512 <= 65536
constexpr int kVTailBarrier = 1;    // named barrier of the 256 consumer threads
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int D, int kStagesT, int kBmT, int kBnT>
struct CfgT {
  static constexpr int kBm = kBmT;
  static constexpr int kBn = kBnT;
  static constexpr int kDp = (D + 63) / 64 * 64;  // columns held in shared memory
  static constexpr int kPanels = kDp / 64;
  static constexpr int kStages = kStagesT;
  static constexpr uint32_t kQBytes = kBm * kDp * 2;
  static constexpr uint32_t kKvBytes = kBn * kDp * 2;  // one K or one V tile
  static constexpr uint32_t kQPanel = kBm * 128;       // bytes per 64-column panel
  static constexpr uint32_t kKvPanel = kBn * 128;
  // Tiles (1024-aligned), then the barriers (v1: q, k_full, v_full, empty; v1.1: q, k_full,
  // v_full, k_empty, v_empty); + 1024 to align the dynamic base.
  static constexpr int kBarrierBytes = 8 * (1 + 4 * kStages);
  static constexpr int kSmemBytes = 1024 + kQBytes + 2 * kStages * kKvBytes + kBarrierBytes;
  static_assert(kBm % 64 == 0 && kBm <= 192, "consumer warpgroups of 64 rows");
  static_assert(kBn % 16 == 0 && kBn <= 256, "wgmma N");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};
template <int D, int kStagesT = 2>
using Cfg = CfgT<D, kStagesT, forward_plan(D).block_m, forward_plan(D).block_n>;

// 0 for a broadcast view's head/batch coordinate (tensor_map.h), else 1.
struct CoordMuls {
  int32_t q_head, q_batch, k_head, k_batch, v_head, v_batch;
};

// A request's last key block: the V rows past its end (rows valid .. kBn - 1 of the stage at
// v_stage) may hold another request's values (even inf / NaN, and 0 * inf = NaN). The `count`
// consumer threads (this one is `first`) zero them, each a share of the 16-byte chunks (a row's
// 128 bytes per panel are swizzled within the row only), make the async proxy (wgmma, and the
// producer's later TMA writes to the stage) see the stores, and wait for each other.
template <class C>
__device__ __forceinline__ void zero_v_tail(unsigned char *v_stage, int valid, int first,
                                            int count) {
  const int chunks = (C::kBn - valid) * C::kPanels * 8;
  for (int idx = first; idx < chunks; idx += count) {
    const int row = valid + idx / (C::kPanels * 8);
    const int pn = (idx / 8) % C::kPanels;
    const int chunk = idx % 8;
    *reinterpret_cast<uint4 *>(v_stage + pn * C::kKvPanel + row * 128 + chunk * 16) =
        make_uint4(0, 0, 0, 0);
  }
  hw::fence_proxy_async();
  // Not bar.sync: the consumers of one tile may run different forms of it (v1.2's trimmed tiles:
  // kFull / kHalf / kIdle, each its own inlined copy of this function), so they meet here from
  // different instructions, which bar.sync's `.aligned` leaves undefined (compute-sanitizer's
  // synccheck reports it, session 30 round 7 / session 31 round 1 on a reduced kernel). ptxas emits
  // the same SASS for both forms here (cuobjdump, every forward instance, session 31).
  hw::named_bar_sync_unaligned(kVTailBarrier, count);
}

// The kernels, in dependency order (clang-format would sort them).
// clang-format off
#include "cuda/forward_v1.cuh"
#include "cuda/forward_softmax.cuh"
#include "cuda/forward_v11.cuh"
#include "cuda/forward_v12.cuh"
// clang-format on

void check(cudaError_t err, const char *what) {
  if (err != cudaSuccess) fail(FOLD_ERR_CUDA, std::string(what) + ": " + cudaGetErrorString(err));
}

// Which forward kernel runs. Default: v1.2 (persistent). On the H200 (CUDA graphs) it was
// 3-24% faster than v1.1 on every causal benchmark shape (session 3: its longest-first tile
// walk keeps the SMs busy through the short diagonal tiles) and, with the chunked tile order,
// -2% to +13% on the training issue's non-causal shapes (session 6, protocol: +1, +2, +5, +5,
// -2, +13%, varlen +2%; benchmarks/results/session6/round1). FOLD_FWD_VARIANT overrides: "v1"
// (the previous kernel), "v1.1", "v1.1-nopp" (v1.1 without the ping-pong turns, to time the
// two overlaps apart), "v1.2" or "v1.2-2wg". Read at every call (a host getenv; graph capture
// records whichever kernel the captured call launched). The choice never depends on the batch.
// At D 64, v1.2 runs three consumer warpgroups on 192 x 128 tiles (session 24, forward protocol
// A/B, graphed, L2 flushed: +18.5% at (8, 2048, 32/32) non-causal, +6.1% causal, +10.8% / +9.9% at
// (2, 8192, 64/8); notes/training_kernels.md "Session 24"), so its bits differ from v1's there
// (each row's keys are summed in 128-key blocks, not the plan's 192), while "v1.2-2wg" keeps
// the two-warpgroup form on the plan's tiles; everywhere else every variant gives v1's bits
// (same tiles, same order of operations).
enum class Variant { kV1, kV11, kV11NoPingPong, kV12, kV12TwoConsumers };
Variant forward_variant() {
  const char *env = std::getenv("FOLD_FWD_VARIANT");
  if (env == nullptr || env[0] == '\0') return Variant::kV12;
  const std::string v(env);
  if (v == "v1" || v == "1") return Variant::kV1;
  if (v == "v1.1" || v == "1.1") return Variant::kV11;
  if (v == "v1.1-nopp") return Variant::kV11NoPingPong;
  if (v == "v1.2" || v == "1.2") return Variant::kV12;
  if (v == "v1.2-2wg") return Variant::kV12TwoConsumers;
  fail(FOLD_ERR_INVALID_ARGUMENT,
       "FOLD_FWD_VARIANT=" + v +
           ": expected v1, v1.1, v1.1-nopp (v1.1 without ping-pong), v1.2 (persistent) or "
           "v1.2-2wg (v1.2 with two consumer warpgroups at D 64)");
}

// The tile order's chunk (tile_order.cuh). Dense and non-causal, every tile has the same
// work: chunks of about two waves of tiles, so that the resident CTAs share a few heads' K / V
// in L2 (H200, graphed, L2 flushed: 484 -> 571 TFLOP/s at (8, 2048, 16/16, 128), within noise
// on the other shapes). Causal or varlen, tiles differ in length and the longest-first order
// over the whole batch balances the SMs better than L2 reuse gains: one chunk of everything
// (two-wave chunks measured 4-28% slower there), except dense causal MHA at D 128 and D 64 (below):
// there each head has its own K / V and one chunk of every pair runs up to one head per resident
// CTA, each query block re-reading its head's K / V from DRAM (ncu at (8, 2048, 16/16, 128): DRAM
// 69%, L2 hits 33%), so smaller chunks: half a wave of pairs (two query blocks of each head in
// flight) measured +12.8% there (session 21, protocol A/B, graphed, L2 flushed: 419.5 -> 473.1
// TFLOP/s), and at D 128 chunks of 4 heads a further +9% (session 27, below), while GQA shapes
// lost up to 16% (their groups already share K / V). FOLD_FWD_HB_CHUNK=n (read at
// every call) sets the target number of (request, head) pairs per chunk instead (for sweeps; 0 =
// one chunk). In units of one KV head's G query heads, so that a chunk never splits a group (its K
// / V would be read again by the next chunk); balanced, only the last chunk may be short.
// Scheduling only: the bits are the same for every choice. It depends on the batch, which an
// order may (never what a tile computes).
TileOrder tile_order(const fold_attn_problem_t &p, int64_t q_blocks) {
  const int64_t group = p.n_heads / p.n_kv_heads;
  const int64_t n_units = static_cast<int64_t>(p.batch) * p.n_kv_heads;
  const bool uniform = !p.causal && p.cu_seqlens == nullptr;
  // (Only with 16 query blocks or more, as measured: with fewer, half a wave of pairs is one or
  // two waves of tiles, where two-wave chunks lost to the longest-first order.)
  // At D 64 (192-row tiles since session 24) the same chunks measured +1.7% / +4.7% at (8, 2048,
  // 32/32) causal (session 25, two protocol A/B runs, graphed, L2 flushed; -1.7% in session 21 on
  // the 128-row tiles of then), so D 64 takes them too from S 2048 (11 query blocks there).
  const bool causal_mha =
      p.causal && p.cu_seqlens == nullptr && group == 1 &&
      ((p.head_dim == 128 && q_blocks >= 16) || (p.head_dim == 64 && p.seqlen >= 2048));
  // At D 128 chunks of 4 heads (session 27, two protocol A/B runs, graphed, L2 flushed: 1.089 /
  // 1.092 over half a wave at (8, 2048, 16/16, 128) causal; notes/training_kernels.md "Session
  // 27"): the CTAs' window of tiles spans a few heads' K / V, and the chunks' 64 tiles stay clear
  // of v1.2's static rounds of 132 CTAs. Not 8: 128 tiles per chunk, a hair under one round, put
  // each CTA on the same rank of every chunk's longest-first list (0.80, a cliff).
  constexpr int64_t kCausalMhaD128Heads = 4;
  int64_t target = uniform      ? (2 * sm_count() + q_blocks - 1) / std::max<int64_t>(q_blocks, 1)
                   : causal_mha ? (p.head_dim == 128 ? kCausalMhaD128Heads
                                                     : std::max<int64_t>(sm_count() / 2, 1))
                                : n_units * group;
  if (const char *env = std::getenv("FOLD_FWD_HB_CHUNK"); env != nullptr && env[0] != '\0') {
    char *end = nullptr;
    const long long n = std::strtoll(env, &end, 10);
    if (*end != '\0' || n < 0)
      fail(FOLD_ERR_INVALID_ARGUMENT, std::string("FOLD_FWD_HB_CHUNK=") + env +
                                          ": expected 0 (one chunk) or a positive integer");
    // Clamped before the rounding below, so that no value can overflow it.
    target = n > 0 ? std::min<long long>(n, n_units * group) : n_units * group;
  }
  target = std::clamp<int64_t>((target + group - 1) / group, 1, std::max<int64_t>(n_units, 1));
  const int64_t n_chunks = (n_units + target - 1) / target;
  const int64_t chunk = n_chunks > 0 ? (n_units + n_chunks - 1) / n_chunks : 1;
  return TileOrder{static_cast<uint32_t>(p.n_heads), static_cast<uint32_t>(n_units * group),
                   static_cast<uint32_t>(q_blocks), static_cast<uint32_t>(chunk * group)};
}

// A setting read from the environment at every call (for A/B runs): the index of its value in
// `values`, `fallback` when unset or empty; any other value is refused, naming the variable.
int env_choice(const char *name, std::initializer_list<const char *> values, int fallback) {
  const char *env = std::getenv(name);
  if (env == nullptr || env[0] == '\0') return fallback;
  const std::string v(env);
  std::string expected;
  int i = 0;
  for (const char *value : values) {
    if (v == value) return i;
    expected +=
        std::string(i == 0 ? "" : (i + 1 == static_cast<int>(values.size()) ? " or " : ", ")) +
        value;
    ++i;
  }
  fail(FOLD_ERR_INVALID_ARGUMENT, std::string(name) + "=" + v + ": expected " + expected);
}

// v1.2's trimmed tiles (the kernel's kHalf and kIdle forms), on by default (session 25, forward
// protocol A/B, graphed, L2 flushed: +1-2% on the D 64 causal shapes, whose 192-row tiles leave
// a consumer idle in a request's last tile and a half-empty diagonal block in every other tile;
// the bits are the same: notes/training_kernels.md "Session 25"). FOLD_FWD_TRIM=0 (read at every
// call) turns them off, for A/B runs.
bool forward_trim() { return env_choice("FOLD_FWD_TRIM", {"0", "1"}, 1) == 1; }

// v1.2's CTA count: FOLD_FWD_CTAS (read at every call, a positive integer) caps it, so that
// the tests can make a few CTAs walk many tiles (the cross-tile pipeline state); unset = the
// SM count. Scheduling only: a tile's bits never depend on which CTA runs it.
int64_t persistent_ctas_cap() {
  const char *env = std::getenv("FOLD_FWD_CTAS");
  if (env == nullptr || env[0] == '\0') return 0;
  char *end = nullptr;
  const long n = std::strtol(env, &end, 10);
  if (*end != '\0' || n <= 0)
    fail(FOLD_ERR_INVALID_ARGUMENT,
         std::string("FOLD_FWD_CTAS=") + env + ": expected a positive integer");
  return n;
}

// The forward's Q / K / V tensor maps (boxes of bm query rows and bn keys) and their coordinate
// multipliers.
struct QkvMaps {
  ViewMap q, k, v;
  CoordMuls muls;
};
QkvMaps make_qkv_maps(const fold_attn_problem_t &p, const fold_tensor_t &q, const fold_tensor_t &k,
                      const fold_tensor_t &v, int bm, int bn) {
  QkvMaps m{make_view_map(p, q, p.n_heads, bm),
            make_view_map(p, k, p.n_kv_heads, bn),
            make_view_map(p, v, p.n_kv_heads, bn),
            {}};
  m.muls = CoordMuls{m.q.head_mul,  m.q.batch_mul, m.k.head_mul,
                     m.k.batch_mul, m.v.head_mul,  m.v.batch_mul};
  return m;
}

// v1.2's epilogue: FOLD_FWD_EPI "shf" (the default) or "stg" (Epi). Same bits either way.
int forward_epi() { return env_choice("FOLD_FWD_EPI", {"stg", "shf"}, kEpiShf); }

// v1.2 (persistent) with NC consumer warpgroups: one CTA per SM (at most one per tile) over
// v1.1's linear tile list, with v1.2's own tiles (V12Cfg). kScan: the instance whose producer
// warps also take the K / V bounds into kv_bounds (zeroed by the caller). kWindow: the instance
// that applies a sliding window. kSinks: the instance that applies attention sinks.
template <int D, class Tag, int NC, int EPI, bool kScan, bool kWindow, bool kSinks>
void launch_v12(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k, fold_tensor_t v,
                fold_tensor_t out, float *lse, uint32_t *kv_bounds, cudaStream_t stream) {
  using C = V12Cfg<D, NC>;
  constexpr int kSmem = C::kSmemBytes + 8;  // + the Q empty barrier
  static_assert(kSmem <= 227 * 1024, "shared memory (v1.2)");
  auto kernel = forward_v12_kernel<D, Tag, NC, EPI, kScan, kWindow, kSinks>;
  set_max_dynamic_smem(reinterpret_cast<const void *>(kernel), kSmem, "forward");
  const QkvMaps m = make_qkv_maps(p, q, k, v, C::kBm, C::kBn);
  const int64_t q_blocks = (static_cast<int64_t>(p.seqlen) + C::kBm - 1) / C::kBm;
  const int64_t all = q_blocks * p.n_heads * p.batch;
  if (all > 0x7fffffff)
    fail(FOLD_ERR_UNSUPPORTED, "seqlen * n_heads * batch too large for one grid");
  const TileOrder order = tile_order(p, q_blocks);
  const int64_t cap = persistent_ctas_cap();
  const int64_t grid = std::min<int64_t>(all, cap > 0 ? cap : sm_count());
  kernel<<<static_cast<unsigned>(grid), (NC + 1) * hw::kWarpgroupThreads, kSmem, stream>>>(
      p, m.q.map, m.k.map, m.v.map, m.muls, out, lse, static_cast<uint32_t>(all), order,
      forward_trim() ? 1 : 0, kv_bounds);
  check(cudaGetLastError(), "forward kernel launch");
}

// v1.2 with the default epilogue, with or without the K / V scan (kv_bounds null: without);
// returns true when it took the K / V bounds.
template <int D, class Tag, int NC, bool kWindow, bool kSinks>
bool launch_v12_shf(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k, fold_tensor_t v,
                    fold_tensor_t out, float *lse, uint32_t *kv_bounds, cudaStream_t stream) {
  if (kv_bounds == nullptr) {
    launch_v12<D, Tag, NC, kEpiShf, false, kWindow, kSinks>(p, q, k, v, out, lse, nullptr, stream);
    return false;
  }
  // Zeroed bits are the identity of the scan warps' atomicMax.
  check(cudaMemsetAsync(kv_bounds, 0, bounds_bytes(p), stream), "cudaMemsetAsync(kv_bounds)");
  launch_v12<D, Tag, NC, kEpiShf, true, kWindow, kSinks>(p, q, k, v, out, lse, kv_bounds, stream);
  return true;
}

// v1.2 with the epilogue forward_epi picks; returns true when it took the K / V bounds. Only
// the default epilogue has a scanning instance (the other is for A/B runs): a separate
// instance, so the forward of inference keeps its code as it was (the scan changes ptxas's
// schedule of the whole kernel, and spills a few tile values in the scan warps).
// Sliding windows likewise: a call whose window can mask something (window_may_mask: the window
// settings alone, never the batch's lengths) runs the kWindow instances, every other call the
// instances of before, whose code the window left untouched. The window instances exist for the
// default epilogue and consumer count only: the A/B forms (FOLD_FWD_EPI=stg, FOLD_FWD_VARIANT=
// v1.2-2wg) refuse a window that masks something in requests of up to seqlen tokens and run one
// that masks nothing as no window (exact then). Attention sinks likewise: a call with sinks runs
// the kSinks instances (with or without the window's), a call without them the instances of
// before; the A/B forms refuse sinks.
template <int D, class Tag, int NC>
bool launch_v12_epi(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k, fold_tensor_t v,
                    fold_tensor_t out, float *lse, uint32_t *kv_bounds, cudaStream_t stream) {
  constexpr bool kDefaultNc = !(D == 64 && NC == 2);  // D 64's default runs 3 consumers
  if ((forward_epi() == kEpiStg || !kDefaultNc) && !window_masks_nothing(p, p.seqlen))
    fail(FOLD_ERR_UNSUPPORTED, "window_before=" + std::to_string(p.window_before) +
                                   ", window_after=" + std::to_string(p.window_after) +
                                   ": FOLD_FWD_EPI=stg and FOLD_FWD_VARIANT=v1.2-2wg take no "
                                   "sliding window shorter than the longest request");
  if ((forward_epi() == kEpiStg || !kDefaultNc) && p.sinks != nullptr)
    fail(FOLD_ERR_UNSUPPORTED,
         "sinks: FOLD_FWD_EPI=stg and FOLD_FWD_VARIANT=v1.2-2wg take no "
         "attention sinks; the default forward does");
  if (forward_epi() == kEpiStg) {
    launch_v12<D, Tag, NC, kEpiStg, false, false, false>(p, q, k, v, out, lse, nullptr, stream);
    return false;
  }
  if constexpr (kDefaultNc) {
    const bool windowed = window_may_mask(p);
    if (p.sinks != nullptr)
      return windowed
                 ? launch_v12_shf<D, Tag, NC, true, true>(p, q, k, v, out, lse, kv_bounds, stream)
                 : launch_v12_shf<D, Tag, NC, false, true>(p, q, k, v, out, lse, kv_bounds, stream);
    if (windowed)
      return launch_v12_shf<D, Tag, NC, true, false>(p, q, k, v, out, lse, kv_bounds, stream);
  }
  return launch_v12_shf<D, Tag, NC, false, false>(p, q, k, v, out, lse, kv_bounds, stream);
}

// Returns true when the launched kernel took the K / V bounds into kv_bounds itself.
template <int D, class Tag>
bool launch(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k, fold_tensor_t v,
            fold_tensor_t out, float *lse, uint32_t *kv_bounds, cudaStream_t stream,
            Variant variant) {
  // Three consumer warpgroups only at D 64 (at D >= 96 a 64 x 128 O, S and P do not fit in 160
  // registers).
  if constexpr (D == 64)
    if (variant == Variant::kV12)
      return launch_v12_epi<D, Tag, 3>(p, q, k, v, out, lse, kv_bounds, stream);
  if (variant == Variant::kV12 || variant == Variant::kV12TwoConsumers)
    return launch_v12_epi<D, Tag, 2>(p, q, k, v, out, lse, kv_bounds, stream);
  // v1 and v1.1 (A/B runs only) mask causally only: a window that masks nothing for requests of
  // up to seqlen tokens leaves their result exact, any other is refused rather than ignored.
  if (!window_masks_nothing(p, p.seqlen))
    fail(FOLD_ERR_UNSUPPORTED, "window_before=" + std::to_string(p.window_before) +
                                   ", window_after=" + std::to_string(p.window_after) +
                                   ": FOLD_FWD_VARIANT v1 / v1.1 take no sliding window shorter "
                                   "than the longest request; the default forward (v1.2) does");
  if (p.sinks != nullptr)
    fail(FOLD_ERR_UNSUPPORTED,
         "sinks: FOLD_FWD_VARIANT v1 / v1.1 take no attention sinks; the "
         "default forward (v1.2) does");
  using C = Cfg<D>;
  using C11 = Cfg<D, V11Stages<D>::value>;
  static_assert(C11::kBm == C::kBm && C11::kBn == C::kBn, "same tiles");
  const bool v11 = variant != Variant::kV1;
  auto v11_kernel = variant == Variant::kV11NoPingPong ? forward_v11_kernel<D, Tag, false>
                                                       : forward_v11_kernel<D, Tag, true>;
  const int smem_bytes = v11 ? C11::kSmemBytes : C::kSmemBytes;
  const void *launched = v11 ? reinterpret_cast<const void *>(v11_kernel)
                             : reinterpret_cast<const void *>(forward_v1_kernel<D, Tag>);
  set_max_dynamic_smem(launched, smem_bytes, "forward");
  const QkvMaps m = make_qkv_maps(p, q, k, v, C::kBm, C::kBn);
  const int64_t q_blocks = (static_cast<int64_t>(p.seqlen) + C::kBm - 1) / C::kBm;
  const int64_t ctas = q_blocks * p.n_heads;
  if (ctas > 0x7fffffff) fail(FOLD_ERR_UNSUPPORTED, "seqlen * n_heads too large for one grid");
  const TileOrder order = tile_order(p, q_blocks);
  if (v11) {
    // One linear index over (query block, request, head): see forward_v11_kernel.
    const int64_t all = ctas * p.batch;
    if (all > 0x7fffffff)
      fail(FOLD_ERR_UNSUPPORTED, "seqlen * n_heads * batch too large for one grid");
    v11_kernel<<<static_cast<unsigned>(all), kThreads, smem_bytes, stream>>>(
        p, m.q.map, m.k.map, m.v.map, m.muls, out, lse, order);
  } else {
    const dim3 grid(static_cast<unsigned>(ctas), static_cast<unsigned>(p.batch), 1);
    forward_v1_kernel<D, Tag>
        <<<grid, kThreads, smem_bytes, stream>>>(p, m.q.map, m.k.map, m.v.map, m.muls, out, lse);
  }
  check(cudaGetLastError(), "forward kernel launch");
  return false;
}

template <class Tag>
bool launch_dim(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k, fold_tensor_t v,
                fold_tensor_t out, float *lse, uint32_t *kv_bounds, cudaStream_t stream,
                Variant variant) {
  switch (p.head_dim) {
    case 64:
      return launch<64, Tag>(p, q, k, v, out, lse, kv_bounds, stream, variant);
    case 96:
      return launch<96, Tag>(p, q, k, v, out, lse, kv_bounds, stream, variant);
    case 128:
      return launch<128, Tag>(p, q, k, v, out, lse, kv_bounds, stream, variant);
    case 256:
      return launch<256, Tag>(p, q, k, v, out, lse, kv_bounds, stream, variant);
    default:
      fail(FOLD_ERR_UNSUPPORTED, "head_dim=" + std::to_string(p.head_dim) +
                                     ": the CUDA training kernels take 64, 96, 128 or 256");
  }
}

// Where the forward's K / V bounds come from: FOLD_FWD_KV_BOUNDS "scan" (the default: the v1.2
// kernel's idle producer warps) or "pass" (launch_kv_bounds after the forward, as for the
// other kernels). Read at every call (A/B runs); the same bits either way.
bool forward_kv_scan() { return env_choice("FOLD_FWD_KV_BOUNDS", {"pass", "scan"}, 1) == 1; }

}  // namespace

void launch_forward(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k, fold_tensor_t v,
                    fold_tensor_t out, float *lse, float *kv_bounds, void *stream_ptr) {
  if (p.total_tokens == 0 || p.seqlen == 0) {
    if (kv_bounds != nullptr) launch_kv_bounds(p, k, v, kv_bounds, stream_ptr);  // zeros
    return;
  }
  // v0 for views TMA cannot describe (a token stride of 0): a property of the layout alone,
  // never of the batch's lengths, so a request's path is the same alone or in any batch.
  if (!tma_describable(p, q) || !tma_describable(p, k) || !tma_describable(p, v)) {
    launch_forward_v0(p, q, k, v, out, lse, stream_ptr);
    if (kv_bounds != nullptr) launch_kv_bounds(p, k, v, kv_bounds, stream_ptr);
    return;
  }
  if (p.batch > 65535) fail(FOLD_ERR_UNSUPPORTED, "batch must be <= 65535 on CUDA");
  // TMA coordinates are signed 32-bit (no tensor this large fits in device memory anyway).
  if (p.total_tokens > 0x7fffffff || p.seqlen > 0x7fffffff - 256)
    fail(FOLD_ERR_UNSUPPORTED, "total_tokens must be < 2^31 on CUDA");
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  const Variant variant = forward_variant();
  // The scanning kernel zeroes and fills kv_bounds where it runs; elsewhere the pass does.
  uint32_t *scan =
      kv_bounds != nullptr && forward_kv_scan() ? reinterpret_cast<uint32_t *>(kv_bounds) : nullptr;
  const bool scanned = p.dtype == FOLD_DTYPE_BF16
                           ? launch_dim<Bf16>(p, q, k, v, out, lse, scan, stream, variant)
                           : launch_dim<F16>(p, q, k, v, out, lse, scan, stream, variant);
  if (kv_bounds != nullptr && !scanned) launch_kv_bounds(p, k, v, kv_bounds, stream_ptr);
}

}  // namespace fold::cuda
