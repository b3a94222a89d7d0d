// The fixed numbers of the decode plan. None depends on the batch, the other requests or
// the thread/CTA count, which is what makes a request's output bit-identical alone and in
// any batch.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace fold::decode {

// Keys per split (a fixed number of keys, not a fixed number of splits). Each split writes
// N (fp32 G x D) and T (fp32 G); the combine adds splits in increasing order.
constexpr int32_t kSplitKeys = 512;

// Value-product slices. A split's numerator N is the sum, in slice order (from 0.0f), of
// pv_slices(G) partial sums; slice p holds the live keys j whose j mod 64 lies in
// [64 p / P, 64 (p + 1) / P), each partial one fma per key in key order from 0.0f. More slices
// let more threads share a 64-key chunk's value product (each (slice, row, column) accumulator
// belongs to one thread); P * G <= max(32, G) bounds the accumulators' storage. Depends on G
// only.
constexpr int kPvSliceBase = 64;
FOLD_HD constexpr int pv_slices(int G) { return G <= 4 ? 8 : (G <= 8 ? 4 : (G <= 16 ? 2 : 1)); }
FOLD_HD constexpr int pv_slice_of(int32_t j, int P) {
  return static_cast<int>(j % kPvSliceBase) / (kPvSliceBase / P);
}

// Guard window on a row's total T = sum_splits T: [2^kGuardLoLog2, 2^hi], N finite.
// Below: Z overshot the LSE by more than 3 binades, so the cut would be deeper than the
// user's depth: the row is recomputed with Z = its exact LSE over the coarse logits of all
// keys (and the group's verdicts with it). Above: Z undershot. The weights are still exact
// (only more keys stay live than needed), so the bound is only what the value operand can
// hold: P is rounded to bf16 (bf16 caches and v8: E4M3 widens exactly to bf16), hi = 60;
// for fp16 caches P is an fp16 operand (<= 65504), hi = 14.
constexpr int kGuardLoLog2 = -3;
constexpr int kGuardHiLog2Bf16 = 60;
constexpr int kGuardHiLog2F16 = 14;

// Default refine bands, in binades below Z: plane B of K is read for keys whose coarse
// logit is within kRefineBand of Z (OR over the group), plane B of V (v8) within
// kVRefineBand. Depth (live keys) is the user's.
constexpr float kDefaultRefineBand = 8.0f;
constexpr float kDefaultVRefineBand = 10.0f;

// Where a depth's screen pays. The screen's work per key (plane-A dots, verdicts OR-ed over the
// group, weights, cut-mass bookkeeping) is fixed, while the bytes it saves shrink with the head
// dim (plane A is D + 2 bytes of a dense key's 4 D + 2) and with the group (a key is live if it is
// live for any of the group's rows). Measured on the H200 (graphed, interleaved, depth 16 against
// every key read by the dense ring, synthetic heavy-tailed caches, notes/decode.md section 28):
// at D 128 the screen is faster up to G 8 (G 4: 11-22%, G 6: 2%, G 8: 0-2%) and slower from G 12
// on (5-22%); at D 64 it is slower at G 6-16 (7-19%) and at G 3-4 by 4-7% (2-5% on the real
// model's captures, G 3, where far fewer keys are live than in the synthetic caches). So with
// bf16 / fp16 values, where G > 8, or D 64 and G > 4, a step with a depth reads every key, as
// depth None (the same bits as depth None: exact weights, no cut). v8 caches follow the same rule
// (session 21, the same A/B with v8, depth 16 against every key read: dense faster by 2.4% at
// D 128 G 16 and by 7.5% at D 64 G 8; at D 128 G 8 by 2.2% and at D 64 G 3 by 7.9% on synthetic
// caches, where the screen is kept as for bf16 values; the screen faster by 3.6% at D 128 G 4).
// D 256, whose dense path is not the ring, keeps the screen. Since session 36 the dense ring
// reads v8 caches on the tensor cores while v8's screened split is still the fma path: there, at
// depth 16, the screen took 1.9-2.8x the dense ring's time (B1-B128, G 3-8; notes/decode.md
// section 45), so v8 caches at D 64 / 128 read every key at every group size. Session 37's v8
// split2 (the screened value product on the tensor cores, 2-2.8x the fma split) did not change
// that: against the dense ring 0.96-1.03 at D 128 G 4, 1.08-1.3 at G 8-16, 1.15-1.22 at D 64 G 3
// (synthetic), and on the real model's capture 0.77-1.03 at B8-B64 but 1.16-1.21 at B1
// (notes/decode.md section 46). The choice depends on the cache's shape only (never on the batch or
// the lengths), so invariance holds; the CPU reference makes the same choice. FOLD_DECODE_SCREEN=1
// keeps the screen everywhere (tests, A/B runs).
FOLD_HD constexpr bool screen_pays(int group, int head_dim, bool v8) {
  if (head_dim != 64 && head_dim != 128) return true;
  if (v8) return false;
  return group <= (head_dim == 64 ? 4 : 8);
}

}  // namespace fold::decode
