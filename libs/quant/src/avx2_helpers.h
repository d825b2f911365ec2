// Internal, for the SIMD kernel files only (the *_avx2.cc files): the AVX2 building blocks
// several of them need, written once. Integer sums are exact, so every kernel built from them
// keeps its bit-identity with the scalar reference.
//
// In an unnamed namespace on purpose, like scale_min_k4.h: every file that includes this gets its
// own copy compiled with its own flags, so no AVX2-compiled copy can be shared with code that runs
// without AVX2 (kernels.h explains why that matters). Include it only after <immintrin.h>, from a
// file compiled with -mavx2 -mfma -mf16c.
#pragma once

#include <immintrin.h>
#include <stdint.h>

namespace colibri::quant::internal {
namespace {

inline float HalfToFloat(uint16_t h) { return _cvtsh_ss(h); }

inline __m256i Load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

inline int HorizontalSum(__m128i v) {
  v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0x4e));
  v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0xb1));
  return _mm_cvtsi128_si32(v);
}

inline int HorizontalSum(__m256i v) {
  return HorizontalSum(_mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
}

// 8 int32 partial sums (4 bytes each) of 32 signed int8 x signed int8 products, by the sign
// trick |x| * (y * sign(x)): exact as long as x has no -128.
inline __m256i SignedPairSums(__m256i x, __m256i y) {
  const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

// Exact sum of the 32 products of signed int8 weights (never -128) with int8 activations.
inline int DotInt8(__m256i w, const int8_t* act) { return HorizontalSum(SignedPairSums(w, Load32(act))); }

// 0xff in byte j where bit j of the little-endian `bits` is set, else 0.
inline __m256i BitsToByteMask(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i mask = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, mask), mask);
}

}  // namespace
}  // namespace colibri::quant::internal
