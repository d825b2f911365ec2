// AVX2 dot products for the codebook i-quants IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and
// IQ3_S. Per group of 32 weights, the grid points are gathered with scalar loads into one
// vector (element order), the sign bits are expanded to +-1 bytes and applied to the
// activations (never -128, so negation is exact), and maddubs + madd give the exact integer
// sums the scalar kernels form (per group, or per 16-value half where the format has two
// scales there). The float tail is the scalar one, so the results are bit-identical to
// iquants.cc / iquants_lowbit.cc. Built with -mavx2 -mfma -mf16c; see kernels.h for what this
// file may include (colibri/quant/codebooks.h is plain data).
#include "kernels.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <string.h>

#include "avx2_helpers.h"
#include "colibri/quant/blocks.h"
#include "colibri/quant/codebooks.h"

namespace colibri::quant::internal {
namespace {

constexpr float kDelta = 0.125f;  // IQ1_S / IQ1_M grid shift, as iquants_lowbit.cc

// The two 16-value halves of 8 int32 partial sums (lanes 0-3: values 0-15).
struct Halves {
  int lo, hi;
};
Halves SplitSum(__m256i v) {
  return {HorizontalSum(_mm256_castsi256_si128(v)), HorizontalSum(_mm256_extracti128_si256(v, 1))};
}

// -1 in byte j where bit j of `bits` is set, else +1.
__m256i PlusMinusOne(uint32_t bits) {
  return _mm256_or_si256(BitsToByteMask(bits), _mm256_set1_epi8(1));
}

// 8 int32 partial sums of magnitude * sign * activation over 32 values (4 values per lane).
__m256i SignedProducts(__m256i magnitudes, uint32_t sign_bits, const int8_t* q8) {
  const __m256i a = _mm256_sign_epi8(Load32(q8), PlusMinusOne(sign_bits));
  return _mm256_madd_epi16(_mm256_maddubs_epi16(magnitudes, a), _mm256_set1_epi16(1));
}

// Same for signed int8 weights (IQ1 grids).
__m256i IntProducts(__m256i w, const int8_t* q8) { return SignedPairSums(w, Load32(q8)); }

__m256i Points64(uint64_t p0, uint64_t p1, uint64_t p2, uint64_t p3) {
  return _mm256_set_epi64x(static_cast<long long>(p3), static_cast<long long>(p2),
                           static_cast<long long>(p1), static_cast<long long>(p0));
}

uint32_t Signs4(uint8_t s0, uint8_t s1, uint8_t s2, uint8_t s3) {
  return s0 | (static_cast<uint32_t>(s1) << 8) | (static_cast<uint32_t>(s2) << 16) |
         (static_cast<uint32_t>(s3) << 24);
}

float DotIQ2_XXSAvx2(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ2_XXS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = HalfToFloat(x[i].d) * y[i].d;
    int32_t bsum = 0;
    for (int g = 0; g < kQK_K / 32; ++g) {
      uint32_t a, b;
      memcpy(&a, x[i].qs + 4 * g, sizeof(a));
      memcpy(&b, x[i].qs + 4 * g + 2, sizeof(b));
      const __m256i mag = Points64(kIq2xxsGrid.v[a & 0xFF], kIq2xxsGrid.v[(a >> 8) & 0xFF],
                                   kIq2xxsGrid.v[(a >> 16) & 0xFF], kIq2xxsGrid.v[a >> 24]);
      const uint32_t signs = Signs4(kIq2xsSigns.v[b & 127], kIq2xsSigns.v[(b >> 7) & 127],
                                    kIq2xsSigns.v[(b >> 14) & 127], kIq2xsSigns.v[(b >> 21) & 127]);
      bsum += HorizontalSum(SignedProducts(mag, signs, y[i].qs + 32 * g)) *
              (2 * static_cast<int32_t>(b >> 28) + 1);
    }
    sum += d * static_cast<float>(bsum);
  }
  return 0.125f * sum;
}

float DotIQ2_XSAvx2(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ2_XS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = HalfToFloat(x[i].d) * y[i].d;
    int32_t bsum = 0;
    for (int g = 0; g < kQK_K / 32; ++g) {
      const uint16_t* q = x[i].qs + 4 * g;
      const __m256i mag = Points64(kIq2xsGrid.v[q[0] & 511], kIq2xsGrid.v[q[1] & 511],
                                   kIq2xsGrid.v[q[2] & 511], kIq2xsGrid.v[q[3] & 511]);
      const uint32_t signs = Signs4(kIq2xsSigns.v[q[0] >> 9], kIq2xsSigns.v[q[1] >> 9],
                                    kIq2xsSigns.v[q[2] >> 9], kIq2xsSigns.v[q[3] >> 9]);
      const Halves h = SplitSum(SignedProducts(mag, signs, y[i].qs + 32 * g));
      bsum += h.lo * (2 * (x[i].scales[g] & 0x0F) + 1);
      bsum += h.hi * (2 * (x[i].scales[g] >> 4) + 1);
    }
    sum += d * static_cast<float>(bsum);
  }
  return 0.125f * sum;
}

float DotIQ2_SAvx2(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ2_S*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = HalfToFloat(x[i].d) * y[i].d;
    int32_t bsum = 0;
    for (int g = 0; g < kQK_K / 32; ++g) {
      const uint8_t* qs = x[i].qs + 4 * g;
      const uint32_t qh = x[i].qh[g];
      const __m256i mag = Points64(
          kIq2sGrid.v[qs[0] | ((qh << 8) & 0x300)], kIq2sGrid.v[qs[1] | ((qh << 6) & 0x300)],
          kIq2sGrid.v[qs[2] | ((qh << 4) & 0x300)], kIq2sGrid.v[qs[3] | ((qh << 2) & 0x300)]);
      uint32_t signs;
      memcpy(&signs, x[i].qs + kQK_K / 8 + 4 * g, sizeof(signs));
      const Halves h = SplitSum(SignedProducts(mag, signs, y[i].qs + 32 * g));
      bsum += (1 + 2 * (x[i].scales[g] & 0x0F)) * h.lo + (1 + 2 * (x[i].scales[g] >> 4)) * h.hi;
    }
    sum += d * static_cast<float>(bsum);
  }
  return 0.125f * sum;
}

float DotIQ3_XXSAvx2(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ3_XXS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = HalfToFloat(x[i].d) * y[i].d;
    int32_t bsum = 0;
    for (int g = 0; g < kQK_K / 32; ++g) {
      const uint8_t* q = x[i].qs + 8 * g;
      uint32_t aux;
      memcpy(&aux, x[i].qs + kQK_K / 4 + 4 * g, sizeof(aux));
      const __m256i mag = _mm256_setr_epi32(
          static_cast<int>(kIq3xxsGrid.v[q[0]]), static_cast<int>(kIq3xxsGrid.v[q[1]]),
          static_cast<int>(kIq3xxsGrid.v[q[2]]), static_cast<int>(kIq3xxsGrid.v[q[3]]),
          static_cast<int>(kIq3xxsGrid.v[q[4]]), static_cast<int>(kIq3xxsGrid.v[q[5]]),
          static_cast<int>(kIq3xxsGrid.v[q[6]]), static_cast<int>(kIq3xxsGrid.v[q[7]]));
      const uint32_t signs =
          Signs4(kIq2xsSigns.v[aux & 127], kIq2xsSigns.v[(aux >> 7) & 127],
                 kIq2xsSigns.v[(aux >> 14) & 127], kIq2xsSigns.v[(aux >> 21) & 127]);
      bsum += HorizontalSum(SignedProducts(mag, signs, y[i].qs + 32 * g)) *
              (2 * static_cast<int32_t>(aux >> 28) + 1);
    }
    sum += d * static_cast<float>(bsum);
  }
  return 0.25f * sum;
}

float DotIQ3_SAvx2(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ3_S*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = HalfToFloat(x[i].d) * y[i].d;
    int32_t bsum = 0;
    for (int g = 0; g < kQK_K / 32; ++g) {
      const uint8_t* q = x[i].qs + 8 * g;
      const uint32_t qh = x[i].qh[g];
      auto point = [&](int k) {
        return static_cast<int>(kIq3sGrid.v[q[k] | (((qh >> k) & 1) << 8)]);
      };
      const __m256i mag = _mm256_setr_epi32(point(0), point(1), point(2), point(3), point(4),
                                            point(5), point(6), point(7));
      uint32_t signs;
      memcpy(&signs, x[i].signs + 4 * g, sizeof(signs));
      const int32_t ls = 2 * ((x[i].scales[g / 2] >> (4 * (g % 2))) & 0x0F) + 1;
      bsum += HorizontalSum(SignedProducts(mag, signs, y[i].qs + 32 * g)) * ls;
    }
    sum += d * static_cast<float>(bsum);
  }
  return sum;
}

float DotIQ1_SAvx2(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ1_S*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int32_t sumi = 0, sumi1 = 0;
    for (int g = 0; g < kQK_K / 32; ++g) {
      const uint8_t* qs = x[i].qs + 4 * g;
      const uint32_t qh = x[i].qh[g];
      const __m256i grid = Points64(
          kIq1sGrid.v[qs[0] | ((qh & 7) << 8)], kIq1sGrid.v[qs[1] | (((qh >> 3) & 7) << 8)],
          kIq1sGrid.v[qs[2] | (((qh >> 6) & 7) << 8)], kIq1sGrid.v[qs[3] | (((qh >> 9) & 7) << 8)]);
      const int32_t ls = 2 * ((qh >> 12) & 7) + 1;
      const int32_t delta = qh & 0x8000 ? -1 : 1;
      sumi += ls * HorizontalSum(IntProducts(grid, y[i].qs + 32 * g));
      sumi1 += ls * delta * (y[i].bsums[2 * g] + y[i].bsums[2 * g + 1]);
    }
    sum += HalfToFloat(x[i].d) * y[i].d *
           (static_cast<float>(sumi) + kDelta * static_cast<float>(sumi1));
  }
  return sum;
}

float DotIQ1_MAvx2(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ1_M*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    uint16_t sc[4];
    memcpy(sc, x[i].scales, sizeof(sc));
    const uint16_t bits = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) |
                                                ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
    int32_t sumi1 = 0, sumi2 = 0;
    for (int g = 0; g < kQK_K / 32; ++g) {
      const uint8_t* qs = x[i].qs + 4 * g;
      const uint32_t h0 = x[i].qh[2 * g], h1 = x[i].qh[2 * g + 1];
      const __m256i grid = Points64(
          kIq1sGrid.v[qs[0] | ((h0 & 7) << 8)], kIq1sGrid.v[qs[1] | (((h0 >> 4) & 7) << 8)],
          kIq1sGrid.v[qs[2] | ((h1 & 7) << 8)], kIq1sGrid.v[qs[3] | (((h1 >> 4) & 7) << 8)]);
      // Shift signs per 8 values: bits 3 and 7 of each qh byte.
      const uint32_t neg = (h0 & 0x08 ? 0xFFu : 0) | (h0 & 0x80 ? 0xFF00u : 0) |
                           (h1 & 0x08 ? 0xFF0000u : 0) | (h1 & 0x80 ? 0xFF000000u : 0);
      const Halves gs = SplitSum(IntProducts(grid, y[i].qs + 32 * g));
      const Halves ss = SplitSum(SignedProducts(_mm256_set1_epi8(1), neg, y[i].qs + 32 * g));
      const int32_t ls1 = 2 * ((sc[g / 2] >> (6 * (g % 2))) & 7) + 1;
      const int32_t ls2 = 2 * ((sc[g / 2] >> (6 * (g % 2) + 3)) & 7) + 1;
      sumi1 += gs.lo * ls1 + gs.hi * ls2;
      sumi2 += ss.lo * ls1 + ss.hi * ls2;
    }
    sum +=
        _cvtsh_ss(bits) * y[i].d * (static_cast<float>(sumi1) + kDelta * static_cast<float>(sumi2));
  }
  return sum;
}

}  // namespace

bool FillAvx2LowBitIQuantVecDot(KernelTable* table) {
  table->vec_dot[16] = DotIQ2_XXSAvx2;
  table->vec_dot[17] = DotIQ2_XSAvx2;
  table->vec_dot[18] = DotIQ3_XXSAvx2;
  table->vec_dot[19] = DotIQ1_SAvx2;
  table->vec_dot[21] = DotIQ3_SAvx2;
  table->vec_dot[22] = DotIQ2_SAvx2;
  table->vec_dot[29] = DotIQ1_MAvx2;
  return true;
}

}  // namespace colibri::quant::internal

#else  // not x86

namespace colibri::quant::internal {
bool FillAvx2LowBitIQuantVecDot(KernelTable*) { return false; }
}  // namespace colibri::quant::internal

#endif
