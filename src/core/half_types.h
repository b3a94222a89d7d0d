// Host-side 16-bit float formats for the CPU reference: storage types and correctly
// rounded (round-to-nearest-even) conversions, matching what the GPU's cvt.rn does, so the
// reference rounds intermediates exactly where and how the kernels do.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/float_bits.h"

namespace fold {

struct bf16_t {
  uint16_t bits;
};
struct f16_t {
  uint16_t bits;
};

inline float to_float(float x) { return x; }
inline float to_float(bf16_t x) { return bits_to_float(static_cast<uint32_t>(x.bits) << 16); }
inline float to_float(f16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exp = (h.bits >> 10) & 0x1fu;
  const uint32_t mant = h.bits & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float
    const float mag = static_cast<float>(mant) * exp2i(-24);
    return sign ? -mag : mag;
  }
  if (exp == 31) return bits_to_float(sign | 0x7f800000u | (mant << 13));
  return bits_to_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline bf16_t bf16_from_float(float x) {
  uint32_t u = float_to_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_t{static_cast<uint16_t>((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16_t{static_cast<uint16_t>(u >> 16)};
}

inline f16_t f16_from_float(float x) {
  const uint32_t u = float_to_bits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return f16_t{static_cast<uint16_t>(sign | 0x7e00u)};
  if (a >= 0x477ff000u) return f16_t{static_cast<uint16_t>(sign | 0x7c00u)};  // rounds to inf
  if (a < 0x38800000u) {  // below 2^-14: a subnormal half, in units of 2^-24
    const float units = std::nearbyint(bits_to_float(a) * exp2i(24));
    return f16_t{static_cast<uint16_t>(sign | static_cast<uint16_t>(units))};
  }
  const uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u;
  return f16_t{static_cast<uint16_t>(sign | (r >> 13))};
}

template <typename T>
inline T from_float(float x);
template <>
inline float from_float<float>(float x) {
  return x;
}
template <>
inline bf16_t from_float<bf16_t>(float x) {
  return bf16_from_float(x);
}
template <>
inline f16_t from_float<f16_t>(float x) {
  return f16_from_float(x);
}

// Rounds x to T's precision and back: the value a 16-bit matrix operand would carry.
template <typename T>
inline float round_to(float x) {
  return to_float(from_float<T>(x));
}

}  // namespace fold
