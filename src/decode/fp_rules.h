// Bit-exact fp32 building blocks of the decode spec, shared by the CPU reference and the
// CUDA kernels (FOLD_HD). Every operation is a single correctly rounded IEEE op: on the
// device the explicit _rn intrinsics (never contracted into FMAs), on the host plain
// arithmetic built with -ffp-contract=off. exp2/log2 are polynomials written here, not
// libm or MUFU, so host and device produce the same bits.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/float_bits.h"
#include "core/host_device.h"

namespace fold::decode {

FOLD_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
FOLD_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
FOLD_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
FOLD_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// a * b + c with one rounding (IEEE fusedMultiplyAdd: std::fmaf is correctly rounded on
// every host, __fmaf_rn on the device). The value product uses it: N += pw * v.
FOLD_HD float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fmaf(a, b, c);
#endif
}

// Round to nearest integer, ties to even, for |x| < 2^23 (the magic-number form: the add
// rounds away the fraction in the current, round-to-nearest-even, mode).
FOLD_HD float rint_rne(float x) {
  const float big = 8388608.0f;  // 2^23
  const uint32_t sign = float_to_bits(x) & 0x80000000u;
  const float a = bits_to_float(float_to_bits(x) & 0x7fffffffu);
  const float r = a < big ? sub_rn(add_rn(a, big), big) : a;
  return bits_to_float(float_to_bits(r) | sign);
}

// rint_rne for a finite x: on the device one cvt.rni (FRND), which rounds to nearest, ties to
// even, exactly as the magic-number form does for every finite float (-0 and the integers
// past 2^23 included); the host keeps the magic-number form. (NaN could differ in sign or
// payload, so the callers that may see one keep rint_rne.)
FOLD_HD float rint_finite_rne(float x) {
#if defined(__CUDA_ARCH__)
  return rintf(x);
#else
  return rint_rne(x);
#endif
}

// exp2_fp's value for -125 <= x < 128: its body, the range tests left to the caller (exp2_fp,
// exp2_fp_sel).
FOLD_HD float exp2_fp_in_range(float x) {
  const float n = rint_finite_rne(x);  // (x is finite)
  const float f = sub_rn(x, n);
  // Horner with one rounding per step (fma_rn: IEEE fusedMultiplyAdd on both sides): half
  // the instructions of a separate multiply and add, which the kernels run per key and row
  // (the dense ring's chunk: ~25 instructions per exp2 before, session 34), and no less exact.
  float p = 1.5337577497120947e-4f;
  p = fma_rn(p, f, 1.3399859890341759e-3f);
  p = fma_rn(p, f, 9.618519805371761e-3f);
  p = fma_rn(p, f, 5.550329014658928e-2f);
  p = fma_rn(p, f, 2.4022646248340607e-1f);
  p = fma_rn(p, f, 6.931471824645996e-1f);
  p = fma_rn(p, f, 1.0f);
  return mul_rn(p, exp2i(static_cast<int>(n)));
}

// 2^x. x >= 128 gives +inf, x < -125 gives 0 (weights that small never matter: the guard
// keeps a row's total within [2^-3, 2^14]). Else 2^n * P(f), n = rint(x), f = x - n in
// [-1/2, 1/2] (exact), P a degree-6 fit of 2^f (relative error < 1e-7 in fp32 Horner, fused steps).
FOLD_HD float exp2_fp(float x) {
  if (!(x < 128.0f)) return bits_to_float(0x7f800000u);
  if (x < -125.0f) return 0.0f;
  return exp2_fp_in_range(x);
}

// exp2_fp(x) for every x (NaN included), bit for bit, without branches: the polynomial always
// runs, on x where exp2_fp would (the same operations on the same operand) and on 0 elsewhere
// (a finite operand: its integer conversion stays defined), and exp2_fp's constants replace
// its result out of range. For the device, where the branches cost more than this (split2's
// key weights). The replacement is a mask on the bits: a float select of the polynomial's
// result, ptxas turned back into a branch around it.
FOLD_HD float exp2_fp_sel(float x) {
  const bool above = !(x < 128.0f), below = x < -125.0f;
  const float r = exp2_fp_in_range(above || below ? 0.0f : x);
  const uint32_t keep = above || below ? 0u : 0xffffffffu;
  return bits_to_float((float_to_bits(r) & keep) | (above ? 0x7f800000u : 0u));
}

// log2(x) for x > 0 (x <= 0 or NaN: -inf; +inf: +inf). x = 2^e * m with m in
// [sqrt(1/2), sqrt(2)); log2(m) = t * P(t), t = m - 1 (exact), P a degree-8 fit
// (absolute error < 1e-7).
FOLD_HD float log2_fp(float x) {
  if (!(x > 0.0f)) return bits_to_float(0xff800000u);
  if (x == bits_to_float(0x7f800000u)) return x;
  int bias = 0;
  if (x < exp2i(-126)) {  // subnormal: scale into the normal range (exact)
    x = mul_rn(x, exp2i(32));
    bias = 32;
  }
  const uint32_t u = float_to_bits(x);
  int e = static_cast<int>(u >> 23) - 127;
  float m = bits_to_float((u & 0x007fffffu) | 0x3f800000u);
  if (m >= 1.41421353816986083984375f) {  // fp32 sqrt(2) rounded down
    m = mul_rn(m, 0.5f);
    e += 1;
  }
  const float t = sub_rn(m, 1.0f);
  float p = 1.2280528247356415e-1f;
  p = add_rn(mul_rn(p, t), -2.0570561289787292e-1f);
  p = add_rn(mul_rn(p, t), 2.1611912548542023e-1f);
  p = add_rn(mul_rn(p, t), -2.3919489979743958e-1f);
  p = add_rn(mul_rn(p, t), 2.8790175914764404e-1f);
  p = add_rn(mul_rn(p, t), -3.606921136379242e-1f);
  p = add_rn(mul_rn(p, t), 4.809107780456543e-1f);
  p = add_rn(mul_rn(p, t), -7.213475108146667e-1f);
  p = add_rn(mul_rn(p, t), 1.4426950216293335f);
  return add_rn(static_cast<float>(e - bias), mul_rn(p, t));
}

// log2(2^x + 2^s) in this order (m, the larger, first): a row's base-2 LSE x with an attention
// sink of base-2 logit s. s = -inf gives x bit for bit (2^-inf = 0, log2(1) = 0).
FOLD_HD float log2_add_exp2(float x, float s) {
  const float m = s > x ? s : x;
  return add_rn(m, log2_fp(add_rn(exp2_fp(sub_rn(x, m)), exp2_fp(sub_rn(s, m)))));
}

}  // namespace fold::decode
