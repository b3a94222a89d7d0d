// Key and query quantisation: Hadamard rotation, one scale per row, two int8 planes.
//
// A row y (D floats, already rotated) is stored as scale * (A + B / 256):
//   scale = round_up_to_bf16(amax(|y|) / 127)        (the division rounds to nearest)
//   x_d   = y_d / scale                              (|x_d| <= 127 since scale >= amax/127)
//   A_d   = clamp(rint(x_d), -127, 127)              (rint: nearest, ties to even)
//   B_d   = clamp(rint((x_d - A_d) * 256), -127, 127)  (x_d - A_d and the *256 are exact)
// so |y_d - scale*(A_d + B_d/256)| <= scale/512 (+ the fp32 rounding of x_d); only where
// |x_d - A_d| > 127.5/256 does B clamp at +-127, and the bound is then scale/256. A never
// clips: the scale was rounded up.
// An all-zero row has scale 0 and zero planes. The scale is stored as bf16 bits (range of
// fp32, so no input can overflow or flush it).
#pragma once

#include <cstdint>

#include "core/float_bits.h"
#include "core/host_device.h"
#include "decode/fp_rules.h"

namespace fold::decode {

constexpr int kPlaneMax = 127;
constexpr float kPlaneBScale = 256.0f;  // plane B holds the residual in units of scale/256

// The orthonormal Hadamard transform up to a factor: in-place Sylvester butterfly without
// the 1/sqrt(n) (n = 64, 128 or 256). Each stage maps (a, b) -> (a + b, a - b) in fp32, so
// a row's bits depend on nothing but the row. Logits divide by n once (a power of two).
FOLD_HD void hadamard_unnormalised(float *x, int n) {
  for (int h = 1; h < n; h *= 2)
    for (int i = 0; i < n; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = add_rn(a, b);
        x[j + h] = sub_rn(a, b);
      }
}

FOLD_HD int log2_pow2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

// The smallest bf16 value >= x (x >= 0 finite), as bf16 bits.
FOLD_HD uint16_t bf16_bits_round_up(float x) {
  uint32_t u = float_to_bits(x);
  if (u & 0xffffu) u = (u & 0xffff0000u) + 0x10000u;
  return static_cast<uint16_t>(u >> 16);
}
FOLD_HD float bf16_bits_to_float(uint16_t b) {
  return bits_to_float(static_cast<uint32_t>(b) << 16);
}

FOLD_HD uint16_t plane_scale_bits(float amax) {
  return bf16_bits_round_up(div_rn(amax, static_cast<float>(kPlaneMax)));
}

FOLD_HD float clamp_plane(float v) {
  return v > kPlaneMax ? static_cast<float>(kPlaneMax)
                       : (v < -kPlaneMax ? -static_cast<float>(kPlaneMax) : v);
}

// One element: x = y / scale. Writes its two planes.
FOLD_HD void split_element(float x, int8_t &a, int8_t &b) {
  const float A = clamp_plane(rint_rne(x));
  const float B = clamp_plane(rint_rne(mul_rn(sub_rn(x, A), kPlaneBScale)));
  a = static_cast<int8_t>(A);
  b = static_cast<int8_t>(B);
}

// Quantises a rotated row y[n] into planes a, b; returns the scale's bf16 bits.
FOLD_HD uint16_t quantise_row(const float *y, int n, int8_t *a, int8_t *b) {
  float amax = 0.0f;
  for (int d = 0; d < n; ++d) {
    const float m = bits_to_float(float_to_bits(y[d]) & 0x7fffffffu);
    amax = m > amax ? m : amax;
  }
  const uint16_t bits = plane_scale_bits(amax);
  const float scale = bf16_bits_to_float(bits);
  for (int d = 0; d < n; ++d) {
    if (scale == 0.0f) {
      a[d] = 0;
      b[d] = 0;
    } else {
      split_element(div_rn(y[d], scale), a[d], b[d]);
    }
  }
  return bits;
}

// The logits. q and k are stored as sq*(qA + qB/256) and sk*(kA + kB/256) of the rotated
// rows, and Hq.Hk = n q.k, so with the integer dots I_xy = sum_d x_d y_d (exact in int32):
//   coarse s_A = float(256*I_AA + I_BA)                         * (sq*sk * 2^-(8 + log2 n))
//   fine   s   = float(65536*I_AA + 256*(I_AB + I_BA) + I_BB)   * (sq*sk * 2^-(16 + log2 n))
// The integers are exact (int32 for the coarse, int64 for the fine one); each converts to
// fp32 with one rounding and takes one multiply. sq*sk (two bf16) and the power of two are
// exact in fp32 barring underflow. The coarse logit sees plane A of the key only; it is what
// the screen reads.
FOLD_HD float logit_multiplier(float sq, float sk, int shift) {
  return mul_rn(mul_rn(sq, sk), exp2i(-shift));
}
FOLD_HD float coarse_logit(int32_t i_aa, int32_t i_ba, float mult_coarse) {
  return mul_rn(static_cast<float>(i_aa * 256 + i_ba), mult_coarse);
}
FOLD_HD float fine_logit(int32_t i_aa, int32_t i_ba, int32_t i_ab, int32_t i_bb, float mult_fine) {
  const int64_t c = static_cast<int64_t>(i_aa) * 65536 + static_cast<int64_t>(i_ab + i_ba) * 256 +
                    static_cast<int64_t>(i_bb);
  return mul_rn(static_cast<float>(c), mult_fine);
}

// The coarse logit's error bound. s - s_A = (256 I_AB + I_BB) * (sq sk 2^-(16 + log2 n)) up to
// the two logits' roundings, and |k_B| <= kPlaneMax, so
//   |s - s_A| <= sk * E,  E = kPlaneMax (256 ||q_A||_1 + ||q_B||_1) sq 2^-(16 + log2 n),
// E a constant of the query row. On ordinary caches sk * E is a tenth of a binade or so; keys of
// huge norm reach hundreds (session 31-32: a row's heaviest key cut with a coarse logit 128
// binades low). The screen must not trust s_A where sk * E is large (kCoarseErrorMax).
constexpr float kCoarseErrorMax = 1.0f;  // log2 units

// E from the q planes' L1 norms (int32: <= 127 * 256 each at D 256).
FOLD_HD float coarse_error_from_l1(int32_t l1a, int32_t l1b, float sq, int log2n) {
  // <= 127 * (256 * 127 * 256 + 127 * 256) ~ 1.06e9: exact in int64, one rounding to float.
  const int64_t c = static_cast<int64_t>(kPlaneMax) * (256 * static_cast<int64_t>(l1a) + l1b);
  return mul_rn(mul_rn(static_cast<float>(c), sq), exp2i(-(16 + log2n)));
}

FOLD_HD float coarse_error_per_scale(const int8_t *a, const int8_t *b, int n, float sq) {
  int32_t l1a = 0, l1b = 0;
  for (int d = 0; d < n; ++d) {
    l1a += a[d] < 0 ? -int32_t{a[d]} : int32_t{a[d]};
    l1b += b[d] < 0 ? -int32_t{b[d]} : int32_t{b[d]};
  }
  return coarse_error_from_l1(l1a, l1b, sq, log2_pow2(n));
}

// Whether a key of scale sk must be live and refined whatever its coarse logit: its error bound
// under the group's largest E exceeds kCoarseErrorMax.
FOLD_HD bool coarse_untrusted(float sk, float e_max) { return mul_rn(sk, e_max) > kCoarseErrorMax; }

}  // namespace fold::decode
