// Internal, for the AVX2 kernel files only (dequantize_avx2.cc, vec_dot_avx2.cc): the 8
// six-bit scales and 8 mins of a Q4_K/Q5_K block (blocks.h) as bytes, using 32-bit words:
// bytes 0-3 hold scales 0-3 (low 6 bits) and the top bits of scales 4-7, bytes 4-7 the same for
// the mins, bytes 8-11 the low nibbles of scales/mins 4-7.
//
// In an unnamed namespace on purpose: every file that includes this gets its own copy compiled
// with its own flags, so no AVX2-compiled copy can be shared with code that runs without AVX2
// (kernels.h explains why that matters).
#pragma once

#include <stdint.h>
#include <string.h>

namespace colibri::quant::internal {
namespace {

inline void UnpackScaleMinK4(const uint8_t* q, uint8_t* sc, uint8_t* m) {
  uint32_t a, b, c;
  memcpy(&a, q, 4);
  memcpy(&b, q + 4, 4);
  memcpy(&c, q + 8, 4);
  const uint32_t sc_lo = a & 0x3f3f3f3fu;
  const uint32_t m_lo = b & 0x3f3f3f3fu;
  const uint32_t sc_hi = (c & 0x0f0f0f0fu) | ((a >> 2) & 0x30303030u);
  const uint32_t m_hi = ((c >> 4) & 0x0f0f0f0fu) | ((b >> 2) & 0x30303030u);
  memcpy(sc, &sc_lo, 4);
  memcpy(sc + 4, &sc_hi, 4);
  memcpy(m, &m_lo, 4);
  memcpy(m + 4, &m_hi, 4);
}

}  // namespace
}  // namespace colibri::quant::internal
