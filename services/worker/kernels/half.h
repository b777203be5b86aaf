// IEEE 754 binary16 ("half", f16) <-> binary32 conversion, and bfloat16 -> binary32,
// portable scalar code.
//
// The KV cache stores f16 values as uint16_t bit patterns. These routines round to
// nearest-even and handle subnormals, infinities and NaN exactly like the x86 F16C
// instructions (vcvtps2ph with round-to-nearest, vcvtph2ps), so the portable and the
// vectorised kernel paths store and read identical bits. Stateless; thread-safe.
#ifndef FOLIO_SERVICES_WORKER_KERNELS_HALF_H_
#define FOLIO_SERVICES_WORKER_KERNELS_HALF_H_

#include <cstdint>
#include <cstring>

namespace folio::worker::kernels {

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | mant << 13;  // inf or NaN (payload kept)
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

inline uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN; keep NaNs quiet
    return sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u | ((abs >> 13) & 0x3ffu) : 0u);
  }
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: overflow to inf
  if (abs < 0x38800000u) {  // result is subnormal or zero
    if (abs < 0x33000000u) return sign;  // below half the smallest subnormal
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // 14..24 more bits than a normal mantissa drops
    const uint32_t kept = mant >> (shift);
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    uint32_t r = kept;
    if (rem > half || (rem == half && (kept & 1u))) ++r;
    return sign | static_cast<uint16_t>(r);
  }
  // Normal: rebias the exponent, round the mantissa to 10 bits (carry may bump exp).
  uint32_t r = abs - 0x38000000u;  // exponent bias 127 -> 15, still 23-bit mantissa
  const uint32_t rem = r & 0x1fffu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return sign | static_cast<uint16_t>(r);
}

// bfloat16 bits (the high half of a binary32) widened exactly; NaN payloads kept.
inline float Bf16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

}  // namespace folio::worker::kernels

#endif  // FOLIO_SERVICES_WORKER_KERNELS_HALF_H_
