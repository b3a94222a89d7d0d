// The scale of the backward's integer grid (ALGORITHMS.md section 5), computed from the
// per-(request, KV head) bounds of the preprocess.
//
// Invariant: every kernel and the CPU reference call this one function on the same stored
// bounds, with only correctly rounded single operations (no contraction), so they all
// derive the same exponents bit for bit (double operations only on the rare path where b_ds is
// below float's normal range: dq_exponent_below_normal).
//
// Bounds, for rows i of the group's query heads and keys j of the request:
//   |dP_ij|           <= ||dO_i|| * ||V_j|| <= max ||dO|| * sqrt(D) * max|V|        = b_dp
//   |dP_ij - Delta_i| <= b_dp + max|Delta|                                          = b_ds
//   |dS_ij|            = P_ij |dP_ij - Delta_i| <= b_ds              (P_ij <= 1)
//   |sum_j dS_ij K_jd|<= b_ds * max|K| * sum_j P_ij <= b_ds * max|K|                = b_dq
// With b = m * 2^e (m in [0.5, 1)):
//   s = 29 - e(b_dq): the whole dQ sum, hence every partial, scaled by 2^s stays below
//     2^29: a 4x margin under int32's 2^31 for rounding of P, of the 16-bit operands and of
//     each partial's conversion to integer.
//   t = 14 - e(b_ds): dS scaled by 2^t stays below 2^14, so the 16-bit dS operand of the
//     dQ and dK products can never overflow fp16 (max 65504 ~ 2^16). dS, not P * 2^s, is
//     what gets rounded to 16 bits; 2^s is applied to the fp32 partial afterwards.
// Exponents are clamped so that every 2^k used stays a normal float: t to [-100, 100], s to
// [-100, 126] (2^-s unscales dQ in one multiply; 2^(s - t), up to 2^226, is applied as two
// multiplies where it leaves the normal range). s's upper bound was 100 until session 31: with
// V ~ 1e-33 (b_dq ~ 2^-109, s wanting ~138) the partials scaled by only 2^100 rounded to 0 and dQ
// came out 0 (session 31's input audit; notes/training_kernels.md). The bits change only where s
// exceeded 100, i.e. b_dq < 2^-71.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/float_bits.h"
#include "core/host_device.h"
#include "fold_attention/fold_attention.h"

namespace fold {

struct GridScale {
  int s;      // dQ partials are rounded to integers in units of 2^-s
  int t;      // dS is carried scaled by 2^t
  int valid;  // 0 when a bound is NaN/inf: gradients of that (request, KV head) are NaN
};

FOLD_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;  // the host build uses -ffp-contract=off
#endif
}
FOLD_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
FOLD_HD float sqrt_rn(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

// e such that |x| < 2^e for finite x (x = m * 2^e, m in [0.5, 1)); tiny values give -126.
FOLD_HD int bound_exponent(float x) {
  const int biased = static_cast<int>((float_to_bits(x) >> 23) & 0xffu);
  return biased == 0 ? -126 : biased - 126;
}

FOLD_HD int clamp_exponent(int e) { return e < -100 ? -100 : (e > 100 ? 100 : e); }

FOLD_HD double dmul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
FOLD_HD double dadd_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

// bound_exponent for a finite double: |x| < 2^e; zero and subnormals give -1022.
FOLD_HD int bound_exponent_f64(double x) {
#if defined(__CUDA_ARCH__)
  const uint64_t u = static_cast<uint64_t>(__double_as_longlong(x));
#else
  uint64_t u;
  std::memcpy(&u, &x, sizeof u);
#endif
  const int biased = static_cast<int>((u >> 52) & 0x7ffu);
  return biased == 0 ? -1022 : biased - 1022;
}

// b_dq's exponent when b_ds fell below float's normal range. There b_dp may have lost its
// bits to underflow (dO and V both tiny: b_dp rounds to a subnormal or 0) while max|K| is
// huge, so the float b_dq can be far below the true bound and s far too large: the dQ
// partials would overflow int32. The same three products in double hold every such value
// (the factors are floats), and correctly rounded double operations agree on host and device.
// Ordinary bounds never come here, so their s is the float rule's, bit for bit.
FOLD_HD int dq_exponent_below_normal(const float *bounds, float sqrt_d) {
  const double b_dp =
      dmul_rn(dmul_rn(bounds[FOLD_BOUND_MAX_DO_NORM], sqrt_d), bounds[FOLD_BOUND_MAX_ABS_V]);
  const double b_ds = dadd_rn(b_dp, bounds[FOLD_BOUND_MAX_ABS_DELTA]);
  return bound_exponent_f64(dmul_rn(b_ds, bounds[FOLD_BOUND_MAX_ABS_K]));
}

FOLD_HD GridScale grid_scale(const float *bounds, int head_dim) {
  const float sqrt_d = sqrt_rn(static_cast<float>(head_dim));
  const float b_dp =
      mul_rn(mul_rn(bounds[FOLD_BOUND_MAX_DO_NORM], sqrt_d), bounds[FOLD_BOUND_MAX_ABS_V]);
  const float b_ds = add_rn(b_dp, bounds[FOLD_BOUND_MAX_ABS_DELTA]);
  const float b_dq = mul_rn(b_ds, bounds[FOLD_BOUND_MAX_ABS_K]);
  const uint32_t inf = 0x7f800000u;
  const bool finite =
      (float_to_bits(b_ds) & 0x7fffffffu) < inf && (float_to_bits(b_dq) & 0x7fffffffu) < inf;
  GridScale g;
  g.valid = finite ? 1 : 0;
  const bool ds_below_normal = (float_to_bits(b_ds) & 0x7f800000u) == 0;
  const int s_raw = 29 - (finite && ds_below_normal ? dq_exponent_below_normal(bounds, sqrt_d)
                                                    : bound_exponent(b_dq));
  g.s = finite ? (s_raw < -100 ? -100 : (s_raw > 126 ? 126 : s_raw)) : 0;
  g.t = finite ? clamp_exponent(14 - bound_exponent(b_ds)) : 0;
  return g;
}

// x * 2^k for k in [-252, 254] as two exact power-of-two multiplies (each factor 2^(k/2) and
// 2^(k - k/2) stays in exp2i's [-126, 127]; the kernels' s - t is in [-200, 226]).
FOLD_HD float scale_pow2(float x, int k) {
  const int k1 = k / 2;
  return mul_rn(mul_rn(x, exp2i(k1)), exp2i(k - k1));
}

}  // namespace fold
