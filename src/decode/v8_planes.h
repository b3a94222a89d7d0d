// v8: values as two E4M3 planes with a power-of-two scale e = 2^x per (request, KV head):
//   y = v * 2^-x (exact),  a = e4m3(y),  b = e4m3(8 * (y - a)),  v ~ e * (a + b/8).
// The exponent depends only on the request's own values (or is given by the user):
//   chosen:  x = ceil(log2(amax)) - 6 from the first non-zero data written to the request
//            (its whole prefill), so |y| <= 64: 7x headroom below E4M3's 448.
//   grown:   when a later value would have |y| > 448 the exponent is re-chosen from the new
//            amax and the request's stored planes are re-quantised (never clipped).
//   fixed:   a user-given exponent never changes; a value beyond its range is an error.
// The relative error of a + b/8 is about 2^-8 of |a| (3 mantissa bits twice), the bf16 floor.
#pragma once

#include <cstdint>

#include "core/float_bits.h"
#include "core/host_device.h"
#include "decode/e4m3.h"
#include "decode/fp_rules.h"

namespace fold::decode {

constexpr int kVExpUnset = -1000;  // no non-zero value written yet
constexpr int kVHeadroomLog2 = 6;  // chosen exponents leave |y| <= 2^6
constexpr int kVExpMin = -120, kVExpMax = 120;

// ceil(log2(amax)) - kVHeadroomLog2 for amax > 0 finite, clamped to [kVExpMin, kVExpMax].
FOLD_HD int v_exponent_for(float amax) {
  const uint32_t u = float_to_bits(amax) & 0x7fffffffu;
  int e;
  if (u < 0x00800000u) {
    e = -126;  // subnormal amax: 2^-126 bounds it
  } else {
    e = static_cast<int>(u >> 23) - 127;
    if (u & 0x007fffffu) e += 1;  // not a power of two: round the log up
  }
  e -= kVHeadroomLog2;
  return e < kVExpMin ? kVExpMin : (e > kVExpMax ? kVExpMax : e);
}

// Whether |v| fits exponent x without saturating.
FOLD_HD bool v_fits(float abs_v, int x) { return mul_rn(abs_v, exp2i(-x)) <= kE4M3Max; }

FOLD_HD void v8_split(float v, int x, uint8_t &a, uint8_t &b) {
  const float y = mul_rn(v, exp2i(-x));
  a = e4m3_from_float(y);
  b = e4m3_from_float(mul_rn(sub_rn(y, e4m3_to_float(a)), 8.0f));
}

// The value a key contributes: plane A alone, or both planes (refined). Exact in fp32.
FOLD_HD float v8_value(uint8_t a, uint8_t b, int x, bool use_b) {
  float u = e4m3_to_float(a);
  if (use_b) u = add_rn(u, mul_rn(e4m3_to_float(b), 0.125f));
  return mul_rn(u, exp2i(x));
}

}  // namespace fold::decode
