// Scalar conversions between float32 and the 16-bit float formats GGML stores (IEEE binary16
// "f16" and bfloat16 "bf16"). Narrowing rounds to nearest, ties to even, as GGML's portable
// conversions do: f16 overflow becomes infinity, f16 underflow becomes a subnormal or zero, and
// a NaN stays a NaN (f16: 0x7e00 with the sign kept; bf16: the top half with the quiet bit set).
// Pure, header-only, safe from any thread.
#pragma once

#include <cstdint>
#include <cstring>

namespace colibri::quant {

namespace fp16_internal {
inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
}  // namespace fp16_internal

inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) {  // infinity or NaN (payload kept)
    return fp16_internal::BitsFloat(sign | 0x7f800000u | (mantissa << 13));
  }
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  return fp16_internal::BitsFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

inline uint16_t F32ToF16(float f) {
  const uint32_t bits = fp16_internal::FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return sign | 0x7e00u;  // NaN
  // 65520 (0x477ff000) is halfway between 65504, the largest f16, and 65536; the tie goes to
  // the even neighbour, which is infinity.
  if (abs_bits >= 0x477ff000u) return sign | 0x7c00u;
  if (abs_bits >= 0x38800000u) {  // normal f16: rebias the exponent, round off 13 bits
    const uint32_t rebiased = abs_bits - 0x38000000u;
    return sign | static_cast<uint16_t>((rebiased + 0xfffu + ((rebiased >> 13) & 1u)) >> 13);
  }
  // Subnormal f16 (or zero): the result is round(|f| * 2^24) in units of 2^-24.
  if (abs_bits <= 0x33000000u) return sign;  // |f| <= 2^-25 rounds to zero
  const uint32_t exponent = abs_bits >> 23;  // 102..112 here
  const uint32_t mantissa = (abs_bits & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - exponent;  // 14..24
  uint32_t q = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (q & 1u))) ++q;
  return sign | static_cast<uint16_t>(q);
}

inline float BF16ToF32(uint16_t h) {
  return fp16_internal::BitsFloat(static_cast<uint32_t>(h) << 16);
}

inline uint16_t F32ToBF16(float f) {
  const uint32_t bits = fp16_internal::FloatBits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep the top half, force the quiet bit
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  }
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

}  // namespace colibri::quant
