// AVX2 dot products for the legacy formats Q4_0, Q4_1, Q5_0 and Q5_1: the 32 quants of a block
// are unpacked to int8 in element order (nibbles; Q5's fifth bits expanded from qh with a
// byte shuffle and a bit-mask compare), multiplied with the int8 activations exactly
// (maddubs + madd: every int16 pair stays far below saturation), and each block's exact integer
// sum goes through the same float expression as legacy_quants.cc: the results are
// bit-identical to the scalar reference. Built with -mavx2 -mfma -mf16c; see kernels.h for what
// this file may include.
#include "kernels.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <string.h>

#include "avx2_helpers.h"
#include "colibri/quant/blocks.h"

namespace colibri::quant::internal {
namespace {

// Exact sum of 32 products of unsigned weights (<= 31) with int8 activations.
int DotUnsigned(__m256i w, const int8_t* act) {
  return HorizontalSum(
      _mm256_madd_epi16(_mm256_maddubs_epi16(w, Load32(act)), _mm256_set1_epi16(1)));
}

float DotQ4_0Avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / 32; ++i) {
    const int isum = DotInt8(_mm256_sub_epi8(Nibbles(x[i].qs), _mm256_set1_epi8(8)), y[i].qs);
    sum += static_cast<float>(isum) * (HalfToFloat(x[i].d) * HalfToFloat(y[i].d));
  }
  return sum;
}

float DotQ4_1Avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / 32; ++i) {
    const int isum = DotUnsigned(Nibbles(x[i].qs), y[i].qs);
    sum += (HalfToFloat(x[i].d) * HalfToFloat(y[i].d)) * static_cast<float>(isum) +
           HalfToFloat(x[i].m) * HalfToFloat(y[i].s);
  }
  return sum;
}

float DotQ5_0Avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / 32; ++i) {
    const __m256i q = _mm256_or_si256(Nibbles(x[i].qs), FifthBits(x[i].qh));
    const int isum = DotInt8(_mm256_sub_epi8(q, _mm256_set1_epi8(16)), y[i].qs);
    sum += (HalfToFloat(x[i].d) * HalfToFloat(y[i].d)) * static_cast<float>(isum);
  }
  return sum;
}

float DotQ5_1Avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / 32; ++i) {
    const int isum = DotUnsigned(_mm256_or_si256(Nibbles(x[i].qs), FifthBits(x[i].qh)), y[i].qs);
    sum += (HalfToFloat(x[i].d) * HalfToFloat(y[i].d)) * static_cast<float>(isum) +
           HalfToFloat(x[i].m) * HalfToFloat(y[i].s);
  }
  return sum;
}

}  // namespace

bool FillAvx2LegacyVecDot(KernelTable* table) {
  table->vec_dot[2] = DotQ4_0Avx2;
  table->vec_dot[3] = DotQ4_1Avx2;
  table->vec_dot[6] = DotQ5_0Avx2;
  table->vec_dot[7] = DotQ5_1Avx2;
  return true;
}

}  // namespace colibri::quant::internal

#else  // not x86

namespace colibri::quant::internal {
bool FillAvx2LegacyVecDot(KernelTable*) { return false; }
}  // namespace colibri::quant::internal

#endif
