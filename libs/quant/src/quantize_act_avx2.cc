// AVX2 activation quantizers: Q8_0 (GGML's x86 rounding) and Q8_K (quantize_row_q8_K_ref, bsums
// included), the per-call cost in front of every dot product. Same float operations as
// quantize.cc's scalar ones (the products x * scale rounded half to even: vcvtps2dq in the
// default rounding mode equals NearestInt for |v| < 2^22; the f16 scale by vcvtps2ph, which
// rounds as F32ToF16), so the blocks are byte-identical. Built with -mavx2 -mfma -mf16c and
// only called after dispatch.cc has seen those features. See kernels.h for what this file may
// include.
#include "kernels.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <string.h>

#include "avx2_helpers.h"
#include "colibri/quant/blocks.h"

namespace colibri::quant::internal {
namespace {

inline __m256 Abs(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

inline float HorizontalMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// 32 int32 (4 vectors, element order) to 32 int8, saturating, in element order.
inline __m256i PackToBytes(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
  // Bytes now hold a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7 (4-byte groups).
  return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd),
                                     _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

void QuantizeQ8_0ActivationsAvx2(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    const __m256 v[4] = {_mm256_loadu_ps(x), _mm256_loadu_ps(x + 8), _mm256_loadu_ps(x + 16),
                         _mm256_loadu_ps(x + 24)};
    const float amax = HorizontalMax(
        _mm256_max_ps(_mm256_max_ps(Abs(v[0]), Abs(v[1])), _mm256_max_ps(Abs(v[2]), Abs(v[3]))));
    const float d = amax / 127.f;
    y[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
    __m256i q[4];
    for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], id));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs), PackToBytes(q[0], q[1], q[2], q[3]));
  }
}

void QuantizeQ8_KAvx2(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < kQK_K; j += 8) m = _mm256_max_ps(m, Abs(_mm256_loadu_ps(x + j)));
    const float amax = HorizontalMax(m);
    if (!amax) {
      y[i].d = 0;
      memset(y[i].qs, 0, sizeof(y[i].qs));
      memset(y[i].bsums, 0, sizeof(y[i].bsums));
      continue;
    }
    // The reference's max: the first element whose |x| is the largest, with its sign.
    const __m256 target = _mm256_set1_ps(amax);
    int first = 0;
    for (int j = 0; j < kQK_K; j += 8) {
      const int hits =
          _mm256_movemask_ps(_mm256_cmp_ps(Abs(_mm256_loadu_ps(x + j)), target, _CMP_EQ_OQ));
      if (hits != 0) {
        first = j + __builtin_ctz(static_cast<unsigned>(hits));
        break;
      }
    }
    const float iscale = -127.f / x[first];
    const __m256 s = _mm256_set1_ps(iscale);
    const __m256i top = _mm256_set1_epi32(127);
    for (int j = 0; j < kQK_K; j += 32) {
      __m256i q[4];
      for (int k = 0; k < 4; ++k) {
        q[k] = _mm256_min_epi32(
            _mm256_cvtps_epi32(_mm256_mul_ps(s, _mm256_loadu_ps(x + j + 8 * k))), top);
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs + j),
                          PackToBytes(q[0], q[1], q[2], q[3]));
      y[i].bsums[j / 16] = static_cast<int16_t>(HorizontalSum(_mm256_add_epi32(q[0], q[1])));
      y[i].bsums[j / 16 + 1] = static_cast<int16_t>(HorizontalSum(_mm256_add_epi32(q[2], q[3])));
    }
    y[i].d = 1 / iscale;
  }
}

}  // namespace

bool FillAvx2ActivationQuantizers(KernelTable* table) {
  table->quantize_q8_0_act = QuantizeQ8_0ActivationsAvx2;
  table->quantize_q8_k = QuantizeQ8_KAvx2;
  return true;
}

}  // namespace colibri::quant::internal

#else  // not x86

namespace colibri::quant::internal {
bool FillAvx2ActivationQuantizers(KernelTable*) { return false; }
}  // namespace colibri::quant::internal

#endif
