// CPU reference of the deterministic backward (ALGORITHMS.md section 5).
//
// One work item per (request, KV head), like one GPU CTA column per key block:
//   preprocess -> Delta, bounds -> grid_scale(s, t)
//   for each key block (canonically in increasing order):
//     dK/dV accumulate in fp32 over the group's heads, then query blocks, in index order
//     (the fixed order of the CTA that owns the key block);
//     each (query block, key block) dQ partial = sum_j round16(dS * 2^t) K_j in fp32, is
//     scaled by 2^(s - t), rounded to nearest-even int32 and added to the grid with integer
//     (wrap-around) addition, which is associative: any tile order gives the same bits.
//   postprocess: dQ = float(grid) * 2^-s * softmax_scale; dK = acc * 2^-t * softmax_scale.
// fp16 safety: the only 16-bit intermediates are P <= 1 and dS * 2^t < 2^14 (grid_scale.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/float_bits.h"
#include "core/grid_scale.h"
#include "core/tile_plan.h"
#include "core/window.h"
#include "cpu/parallel.h"
#include "cpu/reference.h"
#include "cpu/rows.h"

namespace fold::cpu {

namespace {

constexpr float kLog2e = 1.4426950408889634f;

// cvt.rni.s32.f32: round to nearest even, saturate, NaN -> 0.
int32_t to_int_rn_sat(float x) {
  if (x != x) return 0;
  if (x >= 2147483648.0f) return std::numeric_limits<int32_t>::max();
  if (x <= -2147483648.0f) return std::numeric_limits<int32_t>::min();
  return static_cast<int32_t>(std::nearbyint(x));
}

struct Tile {
  int head;
  int64_t q0;
};

template <class T>
void backward_group(const fold_attn_problem_t &p, const fold_tensor_t &q, const fold_tensor_t &k,
                    const fold_tensor_t &v, const fold_tensor_t &out, const fold_tensor_t &dout,
                    const float *lse, const float *delta, const float *bounds,
                    const fold_tensor_t &dq, const fold_tensor_t &dk, const fold_tensor_t &dv,
                    int b, int hk, const BackwardOrder *order, BackwardStats *stats) {
  (void)out;
  const Request r = request_of(p, b);
  if (r.len == 0) return;
  const int D = p.head_dim;
  const int group = p.n_heads / p.n_kv_heads;
  const TilePlan plan = backward_plan(D);
  const GridScale g =
      grid_scale(bounds + (static_cast<int64_t>(b) * p.n_kv_heads + hk) * FOLD_BWD_BOUNDS, D);
  const float scale_log2 = p.softmax_scale * kLog2e;
  const float ds_scale = exp2i(g.t);
  const size_t bm = static_cast<size_t>(plan.block_m), bn = static_cast<size_t>(plan.block_n);

  // dQ grid for this request and the group's heads: [len][group][D], wrap-around uint32.
  std::vector<uint32_t> grid(static_cast<size_t>(r.len) * group * D, 0u);
  // With stats, an exact int64 copy of the sums shows whether int32 would have wrapped.
  std::vector<int64_t> shadow(stats ? grid.size() : 0, 0);
  std::vector<float> ks(bn * D), vs(bn * D), qs(bm * D), dos(bm * D), dk_acc(bn * D),
      dv_acc(bn * D);
  std::vector<float> p16(bm * bn), ds16(bm * bn), partial(D), lse2(bm), dl(bm);

  const int64_t n_kb = (r.len + plan.block_n - 1) / plan.block_n;
  std::vector<int64_t> kb_order(static_cast<size_t>(n_kb));
  std::iota(kb_order.begin(), kb_order.end(), 0);
  if (order && order->key_block_seed)
    std::shuffle(kb_order.begin(), kb_order.end(),
                 std::mt19937_64(order->key_block_seed + b * 131 + hk));

  for (const int64_t kb : kb_order) {
    const int64_t k0 = kb * plan.block_n;
    const int nk = static_cast<int>(std::min<int64_t>(plan.block_n, r.len - k0));
    load_rows<T>(p, k, b, r, k0, nk, hk, ks.data());
    load_rows<T>(p, v, b, r, k0, nk, hk, vs.data());
    std::fill(dk_acc.begin(), dk_acc.end(), 0.0f);
    std::fill(dv_acc.begin(), dv_acc.end(), 0.0f);

    // Query blocks that can see this key block (causal masking, a sliding window:
    // core/window.h), aligned to the request's start.
    std::vector<Tile> tiles;
    int64_t q_lo = 0, q_end = 0;
    seeing_queries(p, k0, k0 + nk, r.len, &q_lo, &q_end);
    const int64_t q_begin = (q_lo / plan.block_m) * plan.block_m;
    for (int h = hk * group; h < (hk + 1) * group; ++h)
      for (int64_t q0 = q_begin; q0 < q_end; q0 += plan.block_m) tiles.push_back(Tile{h, q0});
    if (order && order->inner_seed)
      std::shuffle(tiles.begin(), tiles.end(),
                   std::mt19937_64(order->inner_seed + kb * 7919 + b * 131 + hk));

    for (const Tile &tile : tiles) {
      const int h = tile.head;
      const int64_t q0 = tile.q0;
      const int nq = static_cast<int>(std::min<int64_t>(plan.block_m, r.len - q0));
      load_rows<T>(p, q, b, r, q0, nq, h, qs.data());
      load_rows<T>(p, dout, b, r, q0, nq, h, dos.data());
      for (int i = 0; i < nq; ++i) {
        const int64_t row = static_cast<int64_t>(h) * p.total_tokens + r.first + q0 + i;
        lse2[i] = lse[row] * kLog2e;
        dl[i] = delta[row];
      }
      for (int i = 0; i < nq; ++i) {
        for (int j = 0; j < nk; ++j) {
          const bool masked = !key_visible(p, q0 + i, k0 + j);
          float pij = 0.0f, dsij = 0.0f;
          if (!masked) {
            // P <= 1 holds exactly for the true LSE; the stored one is rounded (and huge
            // logits leave fp32 only ulps of room), so clamp: the grid's and fp16's bounds
            // rest on it (grid_scale.h).
            pij = std::min(1.0f, std::exp2(dot(&qs[i * D], &ks[j * D], D) * scale_log2 - lse2[i]));
            const float dpij = dot(&dos[i * D], &vs[j * D], D);
            dsij = pij * (dpij - dl[i]);
          }
          p16[i * bn + j] = round_to<T>(pij);
          ds16[i * bn + j] = round_to<T>(dsij * ds_scale);
          if (stats)
            stats->max_abs_ds = std::max(stats->max_abs_ds, std::fabs(double(dsij) * ds_scale));
        }
      }
      // dV += P^T dO, dK += dS^T Q: key-major, rows in order.
      for (int j = 0; j < nk; ++j)
        for (int i = 0; i < nq; ++i) {
          axpy(p16[i * bn + j], &dos[i * D], &dv_acc[j * D], D);
          axpy(ds16[i * bn + j], &qs[i * D], &dk_acc[j * D], D);
        }
      // dQ partial of this tile pair onto the integer grid.
      for (int i = 0; i < nq; ++i) {
        std::fill(partial.begin(), partial.end(), 0.0f);
        for (int j = 0; j < nk; ++j) axpy(ds16[i * bn + j], &ks[j * D], partial.data(), D);
        uint32_t *cell = &grid[((static_cast<size_t>(q0 + i) * group) + (h - hk * group)) * D];
        for (int d = 0; d < D; ++d) {
          const float scaled = scale_pow2(partial[d], g.s - g.t);
          if (stats)
            stats->max_abs_partial = std::max(stats->max_abs_partial, std::fabs(double(scaled)));
          const int32_t unit = to_int_rn_sat(scaled);
          cell[d] += static_cast<uint32_t>(unit);
          if (stats) shadow[static_cast<size_t>(cell - grid.data()) + d] += unit;
        }
      }
    }
    // Key-block epilogue: dV as accumulated, dK = acc * 2^-t * softmax_scale.
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float dk_unscale = exp2i(-g.t);
    for (size_t e = 0; e < static_cast<size_t>(nk) * D; ++e)
      dk_acc[e] = g.valid ? mul_rn(mul_rn(dk_acc[e], dk_unscale), p.softmax_scale) : nan;
    store_rows<T>(p, dk, b, r, k0, nk, hk, dk_acc.data());
    store_rows<T>(p, dv, b, r, k0, nk, hk, dv_acc.data());
  }

  // Postprocess: integers back to floats, 2^-s folded into the softmax-scale multiply.
  const float dq_unscale = exp2i(-g.s);
  std::vector<float> row(D);
  for (int64_t i = 0; i < r.len; ++i)
    for (int hg = 0; hg < group; ++hg) {
      const uint32_t *cell = &grid[(static_cast<size_t>(i) * group + hg) * D];
      for (int d = 0; d < D; ++d) {
        const int32_t value = static_cast<int32_t>(cell[d]);
        if (stats)
          stats->max_abs_sum =
              std::max(stats->max_abs_sum,
                       std::fabs(double(shadow[static_cast<size_t>(cell - grid.data()) + d])));
        row[d] = g.valid ? mul_rn(mul_rn(static_cast<float>(value), dq_unscale), p.softmax_scale)
                         : std::numeric_limits<float>::quiet_NaN();
      }
      store_rows<T>(p, dq, b, r, i, 1, hk * group + hg, row.data());
    }
}

}  // namespace

void backward(const fold_attn_problem_t &p, fold_tensor_t q, fold_tensor_t k, fold_tensor_t v,
              fold_tensor_t out, fold_tensor_t dout, const float *lse, fold_tensor_t dq,
              fold_tensor_t dk, fold_tensor_t dv, const BackwardOrder *order,
              BackwardStats *stats) {
  std::vector<float> delta(static_cast<size_t>(p.n_heads) * p.total_tokens);
  std::vector<float> bounds(static_cast<size_t>(p.batch) * p.n_kv_heads * FOLD_BWD_BOUNDS);
  bwd_preprocess(p, k, v, out, dout, delta.data(), bounds.data());
  const int64_t items = static_cast<int64_t>(p.batch) * p.n_kv_heads;
  std::vector<BackwardStats> item_stats(stats ? static_cast<size_t>(items) : 0);
  dispatch_dtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    parallel_for(items, [&](int64_t item) {
      backward_group<T>(p, q, k, v, out, dout, lse, delta.data(), bounds.data(), dq, dk, dv,
                        static_cast<int>(item / p.n_kv_heads),
                        static_cast<int>(item % p.n_kv_heads), order,
                        stats ? &item_stats[static_cast<size_t>(item)] : nullptr);
    });
  });
  for (const BackwardStats &s : item_stats) {
    stats->max_abs_partial = std::max(stats->max_abs_partial, s.max_abs_partial);
    stats->max_abs_sum = std::max(stats->max_abs_sum, s.max_abs_sum);
    stats->max_abs_ds = std::max(stats->max_abs_ds, s.max_abs_ds);
  }
}

}  // namespace fold::cpu
