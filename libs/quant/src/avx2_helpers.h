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
#include <string.h>

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

// The 8 horizontal sums of v[0..7] (8 int32 each), in order, as one vector.
inline __m256i ReduceEach8(const __m256i v[8]) {
  // Per 128-bit lane: [v0 v1 v2 v3] partial sums, then the two lanes added.
  const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                          _mm256_permute2x128_si256(a, b, 0x31));
}

// Lane r of the result is acc[r] + rows[r][0] + rows[r][1] + ... + rows[r][7], added in that
// order (an 8x8 transpose, then 8 vector adds): eight independent in-order float sums at once.
inline __m256 AddRowsInOrder(__m256 acc, const __m256 rows[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(rows[0], rows[1]), t1 = _mm256_unpackhi_ps(rows[0], rows[1]);
  const __m256 t2 = _mm256_unpacklo_ps(rows[2], rows[3]), t3 = _mm256_unpackhi_ps(rows[2], rows[3]);
  const __m256 t4 = _mm256_unpacklo_ps(rows[4], rows[5]), t5 = _mm256_unpackhi_ps(rows[4], rows[5]);
  const __m256 t6 = _mm256_unpacklo_ps(rows[6], rows[7]), t7 = _mm256_unpackhi_ps(rows[6], rows[7]);
  // u[k] (k < 4): columns k and k + 4 of rows 0-3 (low lane / high lane); u[k + 4] rows 4-7.
  const __m256 u[8] = {_mm256_shuffle_ps(t0, t2, 0x44), _mm256_shuffle_ps(t0, t2, 0xee),
                       _mm256_shuffle_ps(t1, t3, 0x44), _mm256_shuffle_ps(t1, t3, 0xee),
                       _mm256_shuffle_ps(t4, t6, 0x44), _mm256_shuffle_ps(t4, t6, 0xee),
                       _mm256_shuffle_ps(t5, t7, 0x44), _mm256_shuffle_ps(t5, t7, 0xee)};
  for (int k = 0; k < 4; ++k)
    acc = _mm256_add_ps(acc, _mm256_permute2f128_ps(u[k], u[k + 4], 0x20));
  for (int k = 0; k < 4; ++k)
    acc = _mm256_add_ps(acc, _mm256_permute2f128_ps(u[k], u[k + 4], 0x31));
  return acc;
}

// The 8 int32 words at p, p + stride, ..., p + 7 * stride bytes.
inline __m256i GatherWords(const void* p, int stride) {
  const __m256i idx =
      _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(stride));
  return _mm256_i32gather_epi32(static_cast<const int*>(p), idx, 1);
}

// Exact sum of the 32 products of signed int8 weights (never -128) with int8 activations.
inline int DotInt8(__m256i w, const int8_t* act) {
  return HorizontalSum(SignedPairSums(w, Load32(act)));
}

// 0xff in byte j where bit j of the little-endian `bits` is set, else 0.
inline __m256i BitsToByteMask(uint32_t bits) {
  const __m256i spread =
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                          _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101,
                                             0x0202020202020202, 0x0303030303030303));
  const __m256i mask = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, mask), mask);
}

inline float HorizontalSum(__m128 s) {
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float HorizontalSum(__m256 v) {
  return HorizontalSum(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
}

// The 32 nibbles of a 32-element block's 16 bytes, unsigned, in element order (the Q4_0 layout:
// element j < 16 is the low nibble of byte j, element j + 16 its high nibble).
inline __m256i Nibbles(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m4 = _mm_set1_epi8(0x0f);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
}

// Those 32 nibbles looked up in a 16-entry byte table held in both 128-bit lanes of `book`.
inline __m256i LookupNibbles(__m256i book, const uint8_t* qs) {
  return _mm256_shuffle_epi8(book, Nibbles(qs));
}

// A 16-byte table in both lanes.
inline __m256i BroadcastTable(const void* table16) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(static_cast<const __m128i*>(table16)));
}

// 0x10 in byte j where bit j of the little-endian 4-byte qh is set (Q5_0 / Q5_1), else 0.
inline __m256i FifthBits(const uint8_t qh[4]) {
  uint32_t bits;
  memcpy(&bits, qh, sizeof(bits));
  return _mm256_and_si256(BitsToByteMask(bits), _mm256_set1_epi8(0x10));
}

// The f16 values leading 8 consecutive blocks of `stride` bytes, as floats (8 scalar loads:
// cheaper than a gather here).
inline __m256 GatherHalf8(const void* first, int stride) {
  alignas(16) uint16_t h[8];
  for (int k = 0; k < 8; ++k) memcpy(&h[k], static_cast<const uint8_t*>(first) + k * stride, 2);
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
}

// 2^(e - 128), the MXFP4 block scale for the doubled e2m1 codebook, as iquants.cc's E8M0Half.
inline float E8M0HalfScale(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e) - 1) << 23;
  float f;
  memcpy(&f, &bits, sizeof(f));
  return f;
}

// E8M0HalfScale of the bytes leading 8 consecutive blocks of `stride` bytes.
inline __m256 GatherE8M0HalfScale8(const void* first, int stride) {
  const __m256i e = _mm256_and_si256(GatherWords(first, stride), _mm256_set1_epi32(0xff));
  const __m256i denormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
  const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, denormal, small));
}

}  // namespace
}  // namespace colibri::quant::internal
