// AVX2 + F16C dequantizers. Built with -mavx2 -mfma -mf16c and only called after dispatch.cc
// has seen those features. Each computes the scalar reference's float expression per element
// (a multiply, then a subtract where the format has a min; never a fused multiply-add), so the
// output is bit-identical to dequantize.cc. See kernels.h for what this file may include.
#include "kernels.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <string.h>

#include "avx2_helpers.h"
#include "colibri/quant/blocks.h"
#include "scale_min_k4.h"

namespace colibri::quant::internal {
namespace {

// Converts 32 int8 lanes to floats and stores d * v (kSubtract: d * v - m) to y[0..31].
template <bool kSubtract>
inline void Store32(__m256i bytes, float d, float m, float* y) {
  const __m256 vd = _mm256_set1_ps(d);
  const __m256 vm = _mm256_set1_ps(m);
  const __m128i lo = _mm256_castsi256_si128(bytes);
  const __m128i hi = _mm256_extracti128_si256(bytes, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int k = 0; k < 4; ++k) {
    __m256 v = _mm256_mul_ps(vd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[k])));
    if (kSubtract) v = _mm256_sub_ps(v, vm);
    _mm256_storeu_ps(y + 8 * k, v);
  }
}

// Like Store32, but the first 16 values use (d0, m0) and the last 16 (d1, m1).
template <bool kSubtract>
inline void Store16x2(__m256i bytes, float d0, float m0, float d1, float m1, float* y) {
  const __m128i lo = _mm256_castsi256_si128(bytes);
  const __m128i hi = _mm256_extracti128_si256(bytes, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int k = 0; k < 4; ++k) {
    const __m256 vd = _mm256_set1_ps(k < 2 ? d0 : d1);
    __m256 v = _mm256_mul_ps(vd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[k])));
    if (kSubtract) v = _mm256_sub_ps(v, _mm256_set1_ps(k < 2 ? m0 : m1));
    _mm256_storeu_ps(y + 8 * k, v);
  }
}

// 0x00 / 0xff per byte: whether `bit` is set in each byte of v.
inline __m256i BitSet(__m256i v, uint8_t bit) {
  const __m256i b = _mm256_set1_epi8(static_cast<char>(bit));
  return _mm256_cmpeq_epi8(_mm256_and_si256(v, b), b);
}

void DequantizeF16Avx2(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  }
  for (; i < n; ++i) dst[i] = HalfToFloat(x[i]);
}

void DequantizeBF16Avx2(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
  for (; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(x[i]) << 16;
    memcpy(dst + i, &bits, sizeof(bits));
  }
}

void DequantizeQ8_0Avx2(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK8_0; ++i, y += kQK8_0) {
    Store32<false>(Load32(x[i].qs), HalfToFloat(x[i].d), 0.f, y);
  }
}

// The 16 six-bit Q3_K scales minus 32 (blocks.h) via 32-bit words.
inline void UnpackQ3Scales(const uint8_t* q, int* out) {
  uint32_t a, b, t;
  memcpy(&a, q, 4);
  memcpy(&b, q + 4, 4);
  memcpy(&t, q + 8, 4);
  const uint32_t w[4] = {(a & 0x0f0f0f0fu) | ((t & 0x03030303u) << 4),
                         (b & 0x0f0f0f0fu) | (((t >> 2) & 0x03030303u) << 4),
                         ((a >> 4) & 0x0f0f0f0fu) | (((t >> 4) & 0x03030303u) << 4),
                         ((b >> 4) & 0x0f0f0f0fu) | (((t >> 6) & 0x03030303u) << 4)};
  uint8_t bytes[16];
  memcpy(bytes, w, 16);
  for (int g = 0; g < 16; ++g) out[g] = bytes[g] - 32;
}

void DequantizeQ4_KAvx2(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(src);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  uint8_t sc[8], m[8];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = HalfToFloat(x[i].d);
    const float dmin = HalfToFloat(x[i].dmin);
    UnpackScaleMinK4(x[i].scales, sc, m);
    for (int c = 0; c < 4; ++c, y += 64) {
      const __m256i q = Load32(x[i].qs + 32 * c);
      const __m256i lo = _mm256_and_si256(q, low4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      Store32<true>(lo, d * sc[2 * c], dmin * m[2 * c], y);
      Store32<true>(hi, d * sc[2 * c + 1], dmin * m[2 * c + 1], y + 32);
    }
  }
}

void DequantizeQ5_KAvx2(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(src);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i sixteen = _mm256_set1_epi8(16);
  uint8_t sc[8], m[8];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = HalfToFloat(x[i].d);
    const float dmin = HalfToFloat(x[i].dmin);
    UnpackScaleMinK4(x[i].scales, sc, m);
    const __m256i qh = Load32(x[i].qh);
    for (int c = 0; c < 4; ++c, y += 64) {
      const __m256i q = Load32(x[i].qs + 32 * c);
      const __m256i h0 = _mm256_and_si256(BitSet(qh, static_cast<uint8_t>(1u << (2 * c))), sixteen);
      const __m256i h1 = _mm256_and_si256(BitSet(qh, static_cast<uint8_t>(2u << (2 * c))), sixteen);
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, low4), h0);
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), low4), h1);
      Store32<true>(lo, d * sc[2 * c], dmin * m[2 * c], y);
      Store32<true>(hi, d * sc[2 * c + 1], dmin * m[2 * c + 1], y + 32);
    }
  }
}

void DequantizeQ6_KAvx2(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(src);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i bits45 = _mm256_set1_epi8(0x30);
  const __m256i bias = _mm256_set1_epi8(32);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = HalfToFloat(x[i].d);
    for (int h = 0; h < 2; ++h, y += 128) {
      const __m256i ql0 = Load32(x[i].ql + 64 * h);
      const __m256i ql1 = Load32(x[i].ql + 64 * h + 32);
      const __m256i qh = Load32(x[i].qh + 32 * h);
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, low4),
                          _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45)),
          _mm256_or_si256(_mm256_and_si256(ql1, low4),
                          _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                          _mm256_and_si256(qh, bits45)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                          _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45)),
      };
      const int8_t* sc = x[i].scales + 8 * h;
      for (int k = 0; k < 4; ++k) {
        // (d * scale) * q, the reference's association.
        Store16x2<false>(_mm256_sub_epi8(q[k], bias), d * sc[2 * k], 0.f, d * sc[2 * k + 1], 0.f,
                         y + 32 * k);
      }
    }
  }
}

void DequantizeQ3_KAvx2(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ3_K*>(src);
  const __m256i low2 = _mm256_set1_epi8(3);
  const __m256i four = _mm256_set1_epi8(4);
  int scales[16];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d_all = HalfToFloat(x[i].d);
    UnpackQ3Scales(x[i].scales, scales);
    const __m256i hm = Load32(x[i].hmask);
    for (int h = 0; h < 2; ++h) {
      const __m256i q = Load32(x[i].qs + 32 * h);
      for (int s = 0; s < 4; ++s, y += 32) {
        const __m256i v2 = _mm256_and_si256(_mm256_srli_epi16(q, 2 * s), low2);
        const __m256i hb =
            _mm256_and_si256(BitSet(hm, static_cast<uint8_t>(1u << (4 * h + s))), four);
        const __m256i v = _mm256_sub_epi8(_mm256_or_si256(v2, hb), four);
        Store16x2<false>(v, d_all * scales[8 * h + 2 * s], 0.f, d_all * scales[8 * h + 2 * s + 1],
                         0.f, y);
      }
    }
  }
}

void DequantizeQ2_KAvx2(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ2_K*>(src);
  const __m256i low2 = _mm256_set1_epi8(3);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = HalfToFloat(x[i].d);
    const float dmin = HalfToFloat(x[i].dmin);
    for (int h = 0; h < 2; ++h) {
      const __m256i q = Load32(x[i].qs + 32 * h);
      for (int s = 0; s < 4; ++s, y += 32) {
        const __m256i v = _mm256_and_si256(_mm256_srli_epi16(q, 2 * s), low2);
        const uint8_t sc0 = x[i].scales[8 * h + 2 * s];
        const uint8_t sc1 = x[i].scales[8 * h + 2 * s + 1];
        Store16x2<true>(v, d * (sc0 & 0xF), dmin * (sc0 >> 4), d * (sc1 & 0xF), dmin * (sc1 >> 4),
                        y);
      }
    }
  }
}

}  // namespace

bool FillAvx2Dequantize(KernelTable* table) {
  table->dequantize[kIdF16] = DequantizeF16Avx2;
  table->dequantize[kIdBF16] = DequantizeBF16Avx2;
  table->dequantize[kIdQ8_0] = DequantizeQ8_0Avx2;
  table->dequantize[kIdQ2_K] = DequantizeQ2_KAvx2;
  table->dequantize[kIdQ3_K] = DequantizeQ3_KAvx2;
  table->dequantize[kIdQ4_K] = DequantizeQ4_KAvx2;
  table->dequantize[kIdQ5_K] = DequantizeQ5_KAvx2;
  table->dequantize[kIdQ6_K] = DequantizeQ6_KAvx2;
  return true;
}

}  // namespace colibri::quant::internal

#else  // not x86

namespace colibri::quant::internal {
bool FillAvx2Dequantize(KernelTable*) { return false; }
}  // namespace colibri::quant::internal

#endif
