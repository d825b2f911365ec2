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

#include "colibri/quant/blocks.h"

namespace colibri::quant::internal {
namespace {

float HalfToFloat(uint16_t h) { return _cvtsh_ss(h); }

int SumInt32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// The 32 nibbles of a block, unsigned, in element order (low nibbles 0-15, high 16-31).
__m256i Nibbles(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m4 = _mm_set1_epi8(0x0f);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
}

// 0x10 in byte j where bit j of the little-endian qh is set, else 0.
__m256i FifthBits(const uint8_t qh[4]) {
  uint32_t bits;
  memcpy(&bits, qh, sizeof(bits));
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i mask = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, mask), mask);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// Exact sum of 32 products of unsigned weights (<= 31) with int8 activations.
int DotUnsigned(__m256i w, const int8_t* act) {
  const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act));
  return SumInt32(_mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1)));
}

// Exact sum of 32 products of signed int8 weights with int8 activations (never -128).
int DotSigned(__m256i w, const int8_t* act) {
  const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act));
  const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
  return SumInt32(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

float DotQ4_0Avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / 32; ++i) {
    const int isum = DotSigned(_mm256_sub_epi8(Nibbles(x[i].qs), _mm256_set1_epi8(8)), y[i].qs);
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
    const int isum = DotSigned(_mm256_sub_epi8(q, _mm256_set1_epi8(16)), y[i].qs);
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
