// One decode step of the CPU reference: per (request, KV head) group, the front (quantise
// the group's query rows, score the reference sample, Z per row), the decode (plane-A
// screen, live/refine verdicts OR-ed over the group, final weights, cut mass into the
// denominator and mass x its page's mean V into the numerator, per split of kSplitKeys keys), the
// additive combine in split order, and the guard. notes/decode.md states the rules.
// A sliding window (params.window_before = w) restricts all of it to keys [L - w, L): the sample
// is the window's (plan_window_sample), the splits before the window's add nothing and its first
// split skips the keys before it. Sinks (params.sinks) act in finish() alone.
//
// Invariant: a group's result depends only on its request's cache and queries. Groups are
// independent work items (parallel_for), so thread count and batch never change bits.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/half_types.h"
#include "core/status.h"
#include "cpu/parallel.h"
#include "decode/decode_cpu.h"
#include "decode/decode_plan.h"
#include "decode/planes.h"
#include "decode/reference_z.h"
#include "decode/v8_planes.h"

namespace fold::cpu {

namespace {

using namespace fold::decode;

constexpr float kLog2e = 1.44269504088896340736f;
constexpr float kLn2 = 0.693147180559945309417f;

struct Counters {
  int64_t keys = 0, live = 0, refine = 0, v_refine = 0, fixup_rows = 0;
  double bytes = 0;
};

// One (request, KV head) group: everything the passes need.
class Group {
 public:
  Group(const fold_kvcache_t &c, const fold_decode_params_t &p, const DecodeHooks &hooks, int b,
        int hk)
      : c_(c),
        p_(p),
        hooks_(hooks),
        b_(b),
        hk_(hk),
        D_(c.head_dim),
        G_(p.n_heads / c.n_kv_heads),
        L_(c.lengths[b]),
        F_(p.window_before > 0 && L_ > p.window_before ? L_ - p.window_before : 0),
        log2d_(log2_pow2(c.head_dim)) {}

  void run(fold_tensor_t q, fold_tensor_t out, float *lse, Counters &cnt) {
    if (L_ <= 0) {
      write_empty(out, lse);
      return;
    }
    front(q);
    score();
    std::vector<float> z(G_);
    ZSample plan;
    plan_window_sample(
        L_, F_, plan,
        c_.heavy_keys + (static_cast<int64_t>(b_) * c_.n_kv_heads + hk_) * kHeavyKeys);
    std::vector<float> s(plan.n);
    for (int g = 0; g < G_; ++g) {
      for (int i = 0; i < plan.n; ++i) s[i] = fine(g, plan.key[i]);
      z[g] = add_rn(reference_z(plan, s.data()), hooks_.z_offset);
    }
    // The sample's keys are read with both planes by the front.
    cnt.bytes += static_cast<double>(plan.n) * (2.0 * D_ + 2.0);
    Counters first;
    pass(z, first);
    if (hooks_.guard) {
      std::vector<int> bad;
      for (int g = 0; g < G_; ++g)
        if (!row_ok(g)) bad.push_back(g);
      if (!bad.empty()) {
        cnt.fixup_rows += static_cast<int64_t>(bad.size());
        for (int g : bad) z[g] = exact_lse(g);
        // The first pass was read too, and the fix-up reads both planes once more for its LSE.
        cnt.bytes += first.bytes + static_cast<double>(L_ - F_) * (2.0 * D_ + 2.0);
        first = Counters{};
        // The flagged group's second pass cuts nothing: a cut is decided on the coarse logit,
        // and where the coarse error exceeds the depth (keys of huge norm) the cut can drop the
        // row's heaviest key, which is what flagged it (notes/decode.md section 40).
        pass(z, first, /*exact=*/true);
      }
    }
    cnt.keys += first.keys;
    cnt.live += first.live;
    cnt.refine += first.refine;
    cnt.v_refine += first.v_refine;
    cnt.bytes += first.bytes;
    finish(z, out, lse);
  }

 private:
  int64_t key_base(int32_t j) const {
    const int32_t page =
        c_.page_table[static_cast<int64_t>(b_) * c_.pages_per_request + j / c_.page_size];
    return (static_cast<int64_t>(page) * c_.n_kv_heads + hk_) * c_.page_size + j % c_.page_size;
  }
  int head(int g) const { return hk_ * G_ + g; }
  // Row g's sink as a base-2 logit (-inf without sinks).
  float sink(int g) const {
    return p_.sinks != nullptr ? mul_rn(p_.sinks[head(g)], kLog2e)
                               : -std::numeric_limits<float>::infinity();
  }
  // Offset of key j's page V sum in v_page_sum.
  int64_t page_sum_offset(int32_t j) const {
    const int32_t page =
        c_.page_table[static_cast<int64_t>(b_) * c_.pages_per_request + j / c_.page_size];
    return (static_cast<int64_t>(page) * c_.n_kv_heads + hk_) * D_;
  }
  // Whether P is an fp16 operand (an fp16 cache without v8) rather than bf16.
  bool p_f16() const { return c_.dtype == FOLD_DTYPE_F16 && !c_.v8; }

  void write_empty(fold_tensor_t out, float *lse) {
    for (int g = 0; g < G_; ++g) {
      for (int d = 0; d < D_; ++d) store(out, g, d, 0.0f);
      if (lse)
        lse[static_cast<int64_t>(b_) * p_.n_heads + head(g)] =
            -std::numeric_limits<float>::infinity();
    }
  }

  void store(fold_tensor_t out, int g, int d, float x) {
    const int64_t i = b_ * out.batch_stride + head(g) * out.head_stride + d;
    if (c_.dtype == FOLD_DTYPE_BF16)
      static_cast<bf16_t *>(out.data)[i] = bf16_from_float(x);
    else
      static_cast<f16_t *>(out.data)[i] = f16_from_float(x);
  }

  // Query rows: q * (softmax_scale * log2 e) in fp32, rotated, split into two planes.
 public:
  void front(fold_tensor_t q) {
    qa_.assign(static_cast<size_t>(G_) * D_, 0);
    qb_.assign(static_cast<size_t>(G_) * D_, 0);
    sq_.assign(G_, 0.0f);
    e_max_ = 0.0f;
    const float cmul = mul_rn(p_.softmax_scale, kLog2e);
    std::vector<float> y(D_);
    for (int g = 0; g < G_; ++g) {
      const int64_t base = b_ * q.batch_stride + head(g) * q.head_stride;
      for (int d = 0; d < D_; ++d) {
        const float x = c_.dtype == FOLD_DTYPE_BF16
                            ? to_float(static_cast<const bf16_t *>(q.data)[base + d])
                            : to_float(static_cast<const f16_t *>(q.data)[base + d]);
        y[d] = mul_rn(x, cmul);
      }
      hadamard_unnormalised(y.data(), D_);
      for (int d = 0; d < D_; ++d)
        if (!std::isfinite(y[d]))
          fail("q row (request " + std::to_string(b_) + ", head " + std::to_string(head(g)) +
               ") is not finite after scaling and rotation");
      sq_[g] = bf16_bits_to_float(quantise_row(y.data(), D_, &qa_[g * D_], &qb_[g * D_]));
      const float e = coarse_error_per_scale(&qa_[g * D_], &qb_[g * D_], D_, sq_[g]);
      e_max_ = e > e_max_ ? e : e_max_;
    }
  }

 private:
  // Integer dots of every key against every row; coarse logits.
  void score() {
    const size_t n = static_cast<size_t>(G_) * L_;
    iaa_.resize(n);
    iba_.resize(n);
    sa_.resize(n);
    for (int32_t j = F_; j < L_; ++j) {  // (keys before the window are never read)
      const int64_t r = key_base(j);
      const int8_t *ka = c_.k_a + r * D_;
      const float sk = bf16_bits_to_float(c_.k_scale[r]);
      for (int g = 0; g < G_; ++g) {
        const int8_t *a = &qa_[g * D_], *bq = &qb_[g * D_];
        int32_t aa = 0, ba = 0;
        for (int d = 0; d < D_; ++d) {
          aa += int32_t{a[d]} * ka[d];
          ba += int32_t{bq[d]} * ka[d];
        }
        const size_t i = static_cast<size_t>(g) * L_ + j;
        iaa_[i] = aa;
        iba_[i] = ba;
        sa_[i] = coarse_logit(aa, ba, logit_multiplier(sq_[g], sk, 8 + log2d_));
      }
    }
  }

  float fine(int g, int32_t j) const {
    const int64_t r = key_base(j);
    const int8_t *kb = c_.k_b + r * D_;
    const int8_t *a = &qa_[g * D_], *bq = &qb_[g * D_];
    int32_t ab = 0, bb = 0;
    for (int d = 0; d < D_; ++d) {
      ab += int32_t{a[d]} * kb[d];
      bb += int32_t{bq[d]} * kb[d];
    }
    const size_t i = static_cast<size_t>(g) * L_ + j;
    const float sk = bf16_bits_to_float(c_.k_scale[r]);
    return fine_logit(iaa_[i], iba_[i], ab, bb, logit_multiplier(sq_[g], sk, 16 + log2d_));
  }

  // Z = the row's LSE over the fine logits of all keys (the guard's fix-up): max, then the sum
  // of 2^(s - max) in key order. (Fine, not coarse: the row's heaviest key then weighs 2^0,
  // whatever the coarse error; session 31 found coarse errors of 128 binades on huge keys.)
  // With a window: over the window's keys [F_, L_).
  float exact_lse(int g) const {
    std::vector<float> s(static_cast<size_t>(L_ - F_));
    for (int32_t j = F_; j < L_; ++j) s[static_cast<size_t>(j - F_)] = fine(g, j);
    float m = s[0];
    for (size_t i = 1; i < s.size(); ++i) m = std::max(m, s[i]);
    float sum = 0.0f;
    for (size_t i = 0; i < s.size(); ++i) sum = add_rn(sum, exp2_fp(sub_rn(s[i], m)));
    return add_rn(m, log2_fp(sum));
  }

  bool row_ok(int g) const {
    const float t = t_[g];
    if (!(t >= exp2i(kGuardLoLog2) && t <= exp2i(p_f16() ? kGuardHiLog2F16 : kGuardHiLog2Bf16)))
      return false;
    for (int d = 0; d < D_; ++d)
      if (!std::isfinite(n_[static_cast<size_t>(g) * D_ + d])) return false;
    return true;
  }

  // Verdicts, splits and the additive combine for the given Z per row.
  // exact: every key live and refined (the guard's second pass).
  void pass(const std::vector<float> &z, Counters &cnt, bool exact = false) {
    const bool dense = p_.dense != 0;
    std::vector<float> thr_live(G_), thr_ref(G_), thr_vref(G_);
    const float none = -std::numeric_limits<float>::infinity();
    for (int g = 0; g < G_; ++g) {
      thr_live[g] = exact ? none : sub_rn(z[g], p_.depth);
      thr_ref[g] = exact ? none : sub_rn(z[g], p_.refine_band);
      thr_vref[g] = exact ? none : sub_rn(z[g], p_.v_refine_band);
    }
    int32_t vexp = 0;
    if (c_.v8) {
      vexp = c_.v_exp[static_cast<int64_t>(b_) * c_.n_kv_heads + hk_];
      if (vexp == kVExpUnset) vexp = 0;
    }
    const int32_t split = hooks_.split_keys > 0 ? hooks_.split_keys : FOLD_DECODE_SPLIT_KEYS;
    n_.assign(static_cast<size_t>(G_) * D_, 0.0f);
    t_.assign(G_, 0.0f);
    t_lse_.assign(G_, 0.0f);
    // N's slices (decode_plan.h): nsp[p][g][d], summed in slice order at the split's end.
    const int P = pv_slices(G_);
    const size_t GD = static_cast<size_t>(G_) * D_;
    std::vector<float> nsp(static_cast<size_t>(P) * GD);
    std::vector<float> ns(GD), ts(G_), ts_lse(G_), cut(G_), v(D_);
    std::vector<float> cut_n(static_cast<size_t>(G_) * D_), cut_t(G_), vmean(D_);
    std::vector<uint8_t> *verdicts = nullptr;
    if (hooks_.verdicts) {
      verdicts = &(*hooks_.verdicts)[static_cast<size_t>(b_) * c_.n_kv_heads + hk_];
      verdicts->assign(L_, 0);
    }
    const double v_bytes = c_.v8 ? D_ : 2.0 * D_;
    // A window's keys [F_, L_): the splits before its own add nothing (their partials would be
    // exact zeros: the combine's sum is the same without them), and its first split skips the
    // keys before F_ (neither live nor cut: they carry no mass).
    for (int32_t s0 = F_ - F_ % split; s0 < L_; s0 += split) {
      const int32_t s1 = std::min(L_, s0 + split);
      std::fill(nsp.begin(), nsp.end(), 0.0f);
      std::fill(ts.begin(), ts.end(), 0.0f);
      std::fill(ts_lse.begin(), ts_lse.end(), 0.0f);
      std::fill(cut.begin(), cut.end(), 0.0f);
      std::fill(cut_n.begin(), cut_n.end(), 0.0f);
      std::fill(cut_t.begin(), cut_t.end(), 0.0f);
      bool any_cut = false;
      // Cut mass goes out per page: mass x the page's mean V (its tokens so far).
      auto flush_page = [&](int32_t j_last) {
        if (!any_cut) return;
        any_cut = false;
        cnt.bytes += 4.0 * D_;  // the page's V sum
        const int32_t first = j_last - j_last % c_.page_size;
        const int32_t count = std::min(c_.page_size, L_ - first);
        const float *sum = c_.v_page_sum + page_sum_offset(j_last);
        for (int d = 0; d < D_; ++d) vmean[d] = div_rn(sum[d], static_cast<float>(count));
        for (int g = 0; g < G_; ++g) {
          cut_t[g] = add_rn(cut_t[g], cut[g]);
          for (int d = 0; d < D_; ++d) {
            const size_t i = static_cast<size_t>(g) * D_ + d;
            cut_n[i] = add_rn(cut_n[i], mul_rn(cut[g], vmean[d]));
          }
          cut[g] = 0.0f;
        }
      };
      for (int32_t j = std::max(s0, F_); j < s1; ++j) {
        if (j > s0 && j % c_.page_size == 0) flush_page(j - 1);
        bool live = dense, refine = dense, vref = dense && c_.v8;
        for (int g = 0; g < G_ && !dense; ++g) {
          const float sa = sa_[static_cast<size_t>(g) * L_ + j];
          live = live || sa >= thr_live[g];
          refine = refine || sa >= thr_ref[g];
          vref = vref || (c_.v8 && sa >= thr_vref[g]);
        }
        // A key whose coarse logit may be a binade or more off is live and refined whatever it
        // says (keys of huge norm: planes.h, coarse_untrusted).
        if (!dense && coarse_untrusted(bf16_bits_to_float(c_.k_scale[key_base(j)]), e_max_)) {
          live = true;
          refine = true;
        }
        refine = refine && live;
        vref = vref && live;
        cnt.keys += 1;
        cnt.bytes += D_ + 2.0;
        if (verdicts)
          (*verdicts)[j] = static_cast<uint8_t>((live ? 1 : 0) | (refine ? 2 : 0) | (vref ? 4 : 0));
        if (!live) {
          any_cut = true;
          for (int g = 0; g < G_; ++g)
            cut[g] = add_rn(cut[g], exp2_fp(sub_rn(sa_[static_cast<size_t>(g) * L_ + j], z[g])));
          continue;
        }
        cnt.live += 1;
        cnt.bytes += v_bytes;
        if (refine) {
          cnt.refine += 1;
          cnt.bytes += D_;
        }
        if (vref) {
          cnt.v_refine += 1;
          cnt.bytes += D_;
        }
        const int64_t r = key_base(j) * D_;
        for (int d = 0; d < D_; ++d) {
          if (c_.v8)
            v[d] = v8_value(c_.v_a[r + d], c_.v_b[r + d], vexp, vref);
          else if (c_.dtype == FOLD_DTYPE_BF16)
            v[d] = to_float(static_cast<const bf16_t *>(c_.v)[r + d]);
          else
            v[d] = to_float(static_cast<const f16_t *>(c_.v)[r + d]);
        }
        for (int g = 0; g < G_; ++g) {
          const float ell = refine ? fine(g, j) : sa_[static_cast<size_t>(g) * L_ + j];
          // The weight the value product consumes: rounded to V's operand type (fp16 for
          // an fp16 cache, else bf16), and the denominator sums exactly these.
          const float pe = exp2_fp(sub_rn(ell, z[g]));
          const float pw = p_f16() ? round_to<f16_t>(pe) : round_to<bf16_t>(pe);
          ts[g] = add_rn(ts[g], pw);
          ts_lse[g] = add_rn(ts_lse[g], pe);
          float *nrow =
              &nsp[static_cast<size_t>(pv_slice_of(j, P)) * GD + static_cast<size_t>(g) * D_];
          // One rounding per key: fma (pw * v is exact in fp32 anyway, bar subnormal products).
          for (int d = 0; d < D_; ++d) nrow[d] = fma_rn(pw, v[d], nrow[d]);
        }
      }
      flush_page(s1 - 1);
      for (size_t i = 0; i < GD; ++i) {
        float acc = 0.0f;
        for (int p = 0; p < P; ++p) acc = add_rn(acc, nsp[static_cast<size_t>(p) * GD + i]);
        ns[i] = acc;
      }
      // Cut keys: their mass joins the denominator and mass x page mean(V) the numerator,
      // so the split's partial is final; then the combine adds it (split order).
      for (int g = 0; g < G_; ++g) {
        ts[g] = add_rn(ts[g], cut_t[g]);
        t_[g] = add_rn(t_[g], ts[g]);
        t_lse_[g] = add_rn(t_lse_[g], add_rn(ts_lse[g], cut_t[g]));
        for (int d = 0; d < D_; ++d) {
          const size_t i = static_cast<size_t>(g) * D_ + d;
          ns[i] = add_rn(ns[i], cut_n[i]);
          n_[i] = add_rn(n_[i], ns[i]);
        }
      }
    }
  }

  // The output N / T and the LSE Z + log2 T_lse of the keys; a sink (no value) then scales the
  // output by r = 2^(lse_keys - lse) and takes its mass into the LSE, lse = log2(2^lse_keys +
  // 2^sink). The sink stays out of Z, the depth's cuts and the guard's window: those keep their
  // meaning relative to the keys' own mass, and a sink that outweighs every key shrinks the
  // output by r (down to 0 below 2^-149) without sending the row to the fix-up. A -inf sink
  // gives r = 1 and the bits of no sink.
  void finish(const std::vector<float> &z, fold_tensor_t out, float *lse) {
    for (int g = 0; g < G_; ++g) {
      const float t = t_[g];
      // With the guard on, t is in [2^-3, 2^14] and N finite here. Without it (a test hook),
      // a non-positive or non-finite total still writes zeros, never NaN.
      const bool ok = t > 0.0f && std::isfinite(t);
      // The LSE takes the unrounded weights' total (the output needs the rounded ones).
      const float lse_keys = add_rn(z[g], log2_fp(t_lse_[g]));
      float lse2 = lse_keys, r = 1.0f;
      if (p_.sinks != nullptr && ok) {
        lse2 = log2_add_exp2(lse_keys, sink(g));
        r = exp2_fp(sub_rn(lse_keys, lse2));
      }
      for (int d = 0; d < D_; ++d) {
        float o = ok ? div_rn(n_[static_cast<size_t>(g) * D_ + d], t) : 0.0f;
        if (p_.sinks != nullptr) o = mul_rn(o, r);
        store(out, g, d, std::isfinite(o) ? o : 0.0f);
      }
      if (lse)
        lse[static_cast<int64_t>(b_) * p_.n_heads + head(g)] =
            ok ? mul_rn(kLn2, lse2) : -std::numeric_limits<float>::infinity();
      if (hooks_.z) (*hooks_.z)[static_cast<size_t>(b_) * p_.n_heads + head(g)] = z[g];
    }
  }

  const fold_kvcache_t &c_;
  const fold_decode_params_t &p_;
  const DecodeHooks &hooks_;
  const int b_, hk_, D_, G_;
  const int32_t L_;
  const int32_t F_;  // the first key the step's query sees (its sliding window; 0: none)
  const int log2d_;
  std::vector<int8_t> qa_, qb_;
  std::vector<float> sq_;
  float e_max_ = 0.0f;  // the group's largest coarse error per unit of key scale (planes.h)
  std::vector<int32_t> iaa_, iba_;
  std::vector<float> sa_;
  std::vector<float> n_, t_, t_lse_;
};

}  // namespace

void check_queries(const fold_kvcache_t &c, const fold_decode_params_t &p, fold_tensor_t q) {
  const DecodeHooks defaults;
  for (int b = 0; b < c.batch; ++b)
    if (c.lengths[b] >= 0)
      for (int hk = 0; hk < c.n_kv_heads; ++hk) Group(c, p, defaults, b, hk).front(q);
}

void decode_attend(const fold_kvcache_t &c, const fold_decode_params_t &p, fold_tensor_t q,
                   fold_tensor_t out, float *lse, fold_decode_stats_t *stats,
                   const DecodeHooks *hooks) {
  const DecodeHooks defaults;
  const DecodeHooks &h = hooks ? *hooks : defaults;
  const int64_t items = static_cast<int64_t>(c.batch) * c.n_kv_heads;
  if (h.verdicts) h.verdicts->assign(static_cast<size_t>(items), {});
  if (h.z) h.z->assign(static_cast<size_t>(c.batch) * p.n_heads, 0.0f);
  std::vector<Counters> counters(static_cast<size_t>(items));
  parallel_for(items, [&](int64_t i) {
    Group grp(c, p, h, static_cast<int>(i / c.n_kv_heads), static_cast<int>(i % c.n_kv_heads));
    grp.run(q, out, lse, counters[static_cast<size_t>(i)]);
  });
  if (!stats) return;
  fold_decode_stats_t s{};
  for (const Counters &k : counters) {
    s.keys += k.keys;
    s.live_keys += k.live;
    s.refine_keys += k.refine;
    s.v_refine_keys += k.v_refine;
    s.fixup_rows += k.fixup_rows;
    s.bytes_read += k.bytes;
  }
  for (int b = 0; b < c.batch; ++b)
    if (c.lengths[b] > 0) s.rows += p.n_heads;
  *stats = s;
}

}  // namespace fold::cpu
