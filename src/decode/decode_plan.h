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

}  // namespace fold::decode
