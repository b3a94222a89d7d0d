// OCP FP8 E4M3 ("e4m3fn"): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities,
// S.1111.111 is NaN, the largest finite value is 448, subnormals are m * 2^-9.
// Encoding rounds to nearest, ties to even, and saturates finite values beyond 448 to
// +-448, NaN stays NaN: exactly PTX `cvt.rn.satfinite.e4m3x2.f32`, so a kernel may use the
// hardware conversion and match this reference bit for bit. (The decode never relies on
// saturation: a V exponent is raised before any value could reach it; see v8_planes.h.)
#pragma once

#include <cstdint>

#include "core/float_bits.h"
#include "core/host_device.h"
#include "decode/fp_rules.h"

namespace fold::decode {

constexpr float kE4M3Max = 448.0f;
constexpr uint8_t kE4M3NaN = 0x7f;

FOLD_HD uint8_t e4m3_from_float(float x) {
  const uint32_t u = float_to_bits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint8_t>(sign | kE4M3NaN);
  const float ax = bits_to_float(a);
  if (ax >= kE4M3Max) return static_cast<uint8_t>(sign | 0x7eu);  // satfinite (inf too)
  if (ax < exp2i(-6)) {
    // Subnormal range: units of 2^-9 (the scaling is exact); 8 units is the smallest normal
    // 2^-6, whose encoding 0x08 is the same number, so no special case.
    const float units = rint_rne(mul_rn(ax, exp2i(9)));
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(units));
  }
  // Normal: keep 3 of the 23 fp32 mantissa bits, round to nearest even (a carry moves into
  // the exponent field correctly); the exponent is rebiased from 127 to 7.
  const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);
  const uint32_t exp = (r >> 23) - 120u;
  return static_cast<uint8_t>(sign | (exp << 3) | ((r >> 20) & 7u));
}

FOLD_HD float e4m3_to_float(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 15u;
  const uint32_t mant = b & 7u;
  if (exp == 15u && mant == 7u) return bits_to_float(kCanonicalNaN | sign);
  if (exp == 0u) return bits_to_float(float_to_bits(static_cast<float>(mant) * exp2i(-9)) | sign);
  return bits_to_float(sign | ((exp + 120u) << 23) | (mant << 20));
}

}  // namespace fold::decode
