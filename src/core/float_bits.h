// Bit-level float helpers shared by host and device code.
//
// Why: the backward's bounds and Delta must be bit-identical between the CPU reference and
// the GPU. NaN payloads are the one place where IEEE arithmetic on x86 and on NVIDIA GPUs
// legitimately differ (x86 propagates an input payload, the GPU returns a canonical NaN),
// so every stored value that may be NaN is canonicalised to kCanonicalNaN first.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace fold {

constexpr uint32_t kCanonicalNaN = 0x7fffffffu;

FOLD_HD uint32_t float_to_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

FOLD_HD float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// |x| as bits with NaN made canonical. For non-negative floats the unsigned order of the
// bit patterns is the numeric order (and NaN sorts above +inf), so a max over these bits
// is an order-free reduction that also propagates NaN.
FOLD_HD uint32_t abs_bits_canonical(float x) {
  uint32_t u = float_to_bits(x) & 0x7fffffffu;
  return u > 0x7f800000u ? kCanonicalNaN : u;
}

FOLD_HD float canonical_nan(float x) { return x != x ? bits_to_float(kCanonicalNaN) : x; }

// 2^k for k in [-126, 127], built from its bits so host and device agree exactly.
FOLD_HD float exp2i(int k) { return bits_to_float(static_cast<uint32_t>(k + 127) << 23); }

}  // namespace fold
