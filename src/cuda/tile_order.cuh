#pragma once
// The forward's tile order: which (query block, request, head) a linear tile index names.
//
// Tiles are visited in chunks of `chunk` consecutive (request, head) pairs hb = b * n_heads
// + h (consecutive query heads share KV heads under GQA); inside a chunk y (the query-block
// rank: y = 0 is every request's last block when causal, the longest) varies slowest, so
// each chunk runs longest-first. One chunk of every hb is the longest-first order over the
// whole batch. Smaller chunks make the CTAs resident at a time touch the K / V of one or two
// chunks' heads instead of one head per CTA: a wave of 132 CTAs over 132 heads (MHA) reads
// more K / V than L2 holds, and each query block re-reads it from DRAM. The launcher picks
// the chunk (forward.cu, tile_order). Scheduling only: a tile computes the same bits wherever
// it falls in the order. (A sliding window bounds every tile's keys, so tiles differ less in
// length and the longest-first order matters less; it stays valid, as any order is.)

#include <cstdint>

namespace fold::cuda {

struct TileOrder {
  uint32_t n_heads, n_hb, n_y;  // heads, (request, head) pairs, query-block ranks
  uint32_t chunk;               // (request, head) pairs per chunk, >= 1 (the last may be short)

  // idx < n_hb * n_y.
  __device__ __forceinline__ void decode(uint32_t idx, int &y, int &b, int &h) const {
    const uint32_t per = chunk * n_y;
    const uint32_t c = idx / per;
    const uint32_t rem = idx - c * per;
    const uint32_t hb0 = c * chunk;
    const uint32_t cc = n_hb - hb0 < chunk ? n_hb - hb0 : chunk;
    const uint32_t yy = rem / cc;
    const uint32_t hb = hb0 + (rem - yy * cc);
    const uint32_t bb = hb / n_heads;
    y = static_cast<int>(yy);
    b = static_cast<int>(bb);
    h = static_cast<int>(hb - bb * n_heads);
  }
};

}  // namespace fold::cuda
