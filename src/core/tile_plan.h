// Tile sizes of the training kernels. The CPU reference uses the same plan so that it
// rounds dQ partials at the same (query block, key block) granularity as the GPU.
//
// Invariant (what makes gradients batch- and packing-invariant): a plan may depend on the
// head dimension (and, later, on a sequence's own length and the head counts), never on
// the batch size, on other sequences or on a sequence's offset in a packed batch. Tiles
// always start at a sequence's own first token.
#pragma once

#include "core/host_device.h"

namespace fold {

struct TilePlan {
  int block_m;  // query rows per tile
  int block_n;  // keys per tile
};

// D <= 64: 192 keys per block (H200, graphed: 4.9-5.7% faster at (2, 8192, 64/8, 64), within
// 2.5% either way at (8, 2048, 32/32, 64); 256 keys spill). Fewer blocks per row means fewer
// of the per-block costs (the row max and rescale, the stage barriers) per FLOP.
constexpr FOLD_HD TilePlan forward_plan(int head_dim) {
  if (head_dim <= 64) return TilePlan{128, 192};
  return head_dim <= 128 ? TilePlan{128, 128} : TilePlan{128, 64};
}

constexpr FOLD_HD TilePlan backward_plan(int head_dim) {
  if (head_dim <= 64) return TilePlan{128, 128};
  if (head_dim <= 128) return TilePlan{64, 128};
  return TilePlan{64, 64};
}

}  // namespace fold
