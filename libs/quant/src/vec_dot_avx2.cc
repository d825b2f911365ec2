// AVX2 + FMA + F16C dot products. Built with -mavx2 -mfma -mf16c and only called after
// dispatch.cc has seen those features. See kernels.h for what this file may include.
//
// k-quants: the integer sums of each 256-element super-block are computed exactly with
// maddubs/madd (weights unsigned, activations signed; activations are never -128, so no
// int16 pair saturates), then combined with the same float expression as vec_dot.cc's
// reference, so the result is bit-identical to it. Q8_0 and the float types accumulate in
// vector lanes instead (differences from the reference are float summation order only).
#include "kernels.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <string.h>

#include <type_traits>

#include "avx2_helpers.h"
#include "colibri/quant/blocks.h"
#include "scale_min_k4.h"

namespace colibri::quant::internal {
namespace {

// Pairwise int16 sums of unsigned(u) * signed(s) bytes, then weighted by `scale` (int16 per
// lane) into 8 int32.
inline __m256i DotScaled(__m256i u, __m256i s, __m256i scale) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scale);
}

// Int16 scale vectors for DotScaled over a run of 32 quants that spans two groups of 16: the
// low 128 bits (products of bytes 0..15) need scale[2k], the high ones scale[2k+1]. From a
// vector holding the same 8 scales in both lanes, one in-lane byte shuffle with k[k] makes it.
struct PairShuffles {
  __m256i k[4];
  PairShuffles() {
    for (int i = 0; i < 4; ++i) {
      const short lo = static_cast<short>(((4 * i + 1) << 8) | (4 * i));
      const short hi = static_cast<short>(((4 * i + 3) << 8) | (4 * i + 2));
      k[i] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(lo)), _mm_set1_epi16(hi),
                                     1);
    }
  }
};

// Lane `half` (0 or 1) of 16 int16 scales copied to both lanes.
inline __m256i DuplicateLane(__m256i v, int half) {
  return half == 0 ? _mm256_permute2x128_si256(v, v, 0x00) : _mm256_permute2x128_si256(v, v, 0x11);
}

// 0x00 / 0xff per byte: whether `bit` is set in each byte of v.
inline __m256i BitSet(__m256i v, uint8_t bit) {
  const __m256i b = _mm256_set1_epi8(static_cast<char>(bit));
  return _mm256_cmpeq_epi8(_mm256_and_si256(v, b), b);
}

// Sum over the 16 groups of bsums[g] * weights[g] (16 int16 each).
inline int WeightedBsums(const int16_t* bsums, __m256i weights16) {
  return HorizontalSum(_mm256_madd_epi16(Load32(bsums), weights16));
}

// Same float tail as vec_dot.cc's KBlockSum.
inline float KBlockSum(float d, float dmin, int isum, int imin) {
  return d * static_cast<float>(isum) - dmin * static_cast<float>(imin);
}

float DotF32Avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const float*>(w);
  const auto* y = static_cast<const float*>(a);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), acc1);
    acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), acc2);
    acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), acc3);
  }
  for (; i + 8 <= n; i += 8) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc0);
  }
  float sum = HorizontalSum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  for (; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

inline __m256 LoadHalf8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

inline __m256 LoadBf8(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

inline float BfToFloat(uint16_t h) {
  return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(h) << 16)));
}

template <bool kBf16>
float DotHalfAvx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  auto load = [](const uint16_t* p) { return kBf16 ? LoadBf8(p) : LoadHalf8(p); };
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm256_fmadd_ps(load(x + i), load(y + i), acc0);
    acc1 = _mm256_fmadd_ps(load(x + i + 8), load(y + i + 8), acc1);
    acc2 = _mm256_fmadd_ps(load(x + i + 16), load(y + i + 16), acc2);
    acc3 = _mm256_fmadd_ps(load(x + i + 24), load(y + i + 24), acc3);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(load(x + i), load(y + i), acc0);
  float sum = HorizontalSum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  for (; i < n; ++i) {
    sum += kBf16 ? BfToFloat(x[i]) * BfToFloat(y[i]) : HalfToFloat(x[i]) * HalfToFloat(y[i]);
  }
  return sum;
}

float DotQ8_0Avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const int64_t nb = n / kQK8_0;
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    const __m256 d0 = _mm256_set1_ps(HalfToFloat(x[i].d) * HalfToFloat(y[i].d));
    const __m256 d1 = _mm256_set1_ps(HalfToFloat(x[i + 1].d) * HalfToFloat(y[i + 1].d));
    const __m256i p0 = SignedPairSums(Load32(x[i].qs), Load32(y[i].qs));
    const __m256i p1 = SignedPairSums(Load32(x[i + 1].qs), Load32(y[i + 1].qs));
    acc0 = _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(p0), acc0);
    acc1 = _mm256_fmadd_ps(d1, _mm256_cvtepi32_ps(p1), acc1);
  }
  for (; i < nb; ++i) {
    const __m256 d0 = _mm256_set1_ps(HalfToFloat(x[i].d) * HalfToFloat(y[i].d));
    acc0 = _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(SignedPairSums(Load32(x[i].qs), Load32(y[i].qs))),
                           acc0);
  }
  return HorizontalSum(_mm256_add_ps(acc0, acc1));
}

float DotQ8_KAvx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ8_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    __m256i acc = _mm256_setzero_si256();
    for (int k = 0; k < kQK_K; k += 32) {
      acc = _mm256_add_epi32(acc, SignedPairSums(Load32(x[i].qs + k), Load32(y[i].qs + k)));
    }
    sum += (x[i].d * y[i].d) * static_cast<float>(HorizontalSum(acc));
  }
  return sum;
}

// Sum over the 8 groups of 32 of mins[g] * (bsums[2g] + bsums[2g+1]).
inline int MinsDotBsums(const uint8_t* mins, const int16_t* bsums) {
  // Pair sums of bsums fit in int16 (32 * 127).
  const __m256i pairs = _mm256_madd_epi16(Load32(bsums), _mm256_set1_epi16(1));
  const __m128i pairs16 =
      _mm_packs_epi32(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
  const __m128i mins16 = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(mins)));
  return HorizontalSum(_mm_madd_epi16(pairs16, mins16));
}

float DotQ4_KAvx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  float sum = 0;
  uint8_t sc[8], m[8];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    UnpackScaleMinK4(x[i].scales, sc, m);
    const int imin = MinsDotBsums(m, y[i].bsums);
    __m256i acc = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i q = Load32(x[i].qs + 32 * c);
      const __m256i lo = _mm256_and_si256(q, low4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      const __m256i p_lo =
          DotScaled(lo, Load32(y[i].qs + 64 * c), _mm256_set1_epi16(static_cast<short>(sc[2 * c])));
      const __m256i p_hi = DotScaled(hi, Load32(y[i].qs + 64 * c + 32),
                                     _mm256_set1_epi16(static_cast<short>(sc[2 * c + 1])));
      acc = _mm256_add_epi32(acc, _mm256_add_epi32(p_lo, p_hi));
    }
    const float yd = y[i].d;
    sum +=
        KBlockSum(HalfToFloat(x[i].d) * yd, HalfToFloat(x[i].dmin) * yd, HorizontalSum(acc), imin);
  }
  return sum;
}

float DotQ5_KAvx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i sixteen = _mm256_set1_epi8(16);
  float sum = 0;
  uint8_t sc[8], m[8];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    UnpackScaleMinK4(x[i].scales, sc, m);
    const int imin = MinsDotBsums(m, y[i].bsums);
    const __m256i qh = Load32(x[i].qh);
    __m256i acc = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i q = Load32(x[i].qs + 32 * c);
      const __m256i h0 = _mm256_and_si256(BitSet(qh, static_cast<uint8_t>(1u << (2 * c))), sixteen);
      const __m256i h1 = _mm256_and_si256(BitSet(qh, static_cast<uint8_t>(2u << (2 * c))), sixteen);
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, low4), h0);
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), low4), h1);
      const __m256i p_lo =
          DotScaled(lo, Load32(y[i].qs + 64 * c), _mm256_set1_epi16(static_cast<short>(sc[2 * c])));
      const __m256i p_hi = DotScaled(hi, Load32(y[i].qs + 64 * c + 32),
                                     _mm256_set1_epi16(static_cast<short>(sc[2 * c + 1])));
      acc = _mm256_add_epi32(acc, _mm256_add_epi32(p_lo, p_hi));
    }
    const float yd = y[i].d;
    sum +=
        KBlockSum(HalfToFloat(x[i].d) * yd, HalfToFloat(x[i].dmin) * yd, HorizontalSum(acc), imin);
  }
  return sum;
}

float DotQ6_KAvx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i bits45 = _mm256_set1_epi8(0x30);
  const PairShuffles shuffles;
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    // Quants are stored biased by +32: sum scale * (q - 32) * a as
    // sum scale * q * a - 32 * sum scale * bsum.
    const __m256i scales16 =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales)));
    const int ibias = WeightedBsums(y[i].bsums, scales16);
    __m256i acc = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
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
      const __m256i half_scales = DuplicateLane(scales16, h);
      for (int k = 0; k < 4; ++k) {
        acc = _mm256_add_epi32(acc, DotScaled(q[k], Load32(y[i].qs + 128 * h + 32 * k),
                                              _mm256_shuffle_epi8(half_scales, shuffles.k[k])));
      }
    }
    const int isum = HorizontalSum(acc) - 32 * ibias;
    sum += KBlockSum(HalfToFloat(x[i].d) * y[i].d, 0.f, isum, 0);
  }
  return sum;
}

// The 16 signed scales of a Q3_K block as int16 (blocks.h: low nibbles in bytes 0-7, top
// 2 bits in bytes 8-11), via 32-bit words.
inline __m256i UnpackQ3Scales(const uint8_t* q) {
  uint32_t a, b, t;
  memcpy(&a, q, 4);
  memcpy(&b, q + 4, 4);
  memcpy(&t, q + 8, 4);
  const uint32_t w0 = (a & 0x0f0f0f0fu) | ((t & 0x03030303u) << 4);
  const uint32_t w1 = (b & 0x0f0f0f0fu) | (((t >> 2) & 0x03030303u) << 4);
  const uint32_t w2 = ((a >> 4) & 0x0f0f0f0fu) | (((t >> 4) & 0x03030303u) << 4);
  const uint32_t w3 = ((b >> 4) & 0x0f0f0f0fu) | (((t >> 6) & 0x03030303u) << 4);
  const __m128i biased = _mm_setr_epi32(static_cast<int>(w0), static_cast<int>(w1),
                                        static_cast<int>(w2), static_cast<int>(w3));
  return _mm256_sub_epi16(_mm256_cvtepu8_epi16(biased), _mm256_set1_epi16(32));
}

// A K-quant block's integer sums with one activation block, as 8 int32 lanes: its 8 decoded
// 32-element vectors times the activations, scaled per group (sc). With one activation row the
// caller has summed them already, as it decoded (acc1).
template <int T>
inline __m256i BlockSums(__m256i acc1, const __m256i v[8], const __m256i sc[8], const int8_t* qs) {
  if constexpr (T == 1) return acc1;
  __m256i acc = _mm256_setzero_si256();
  for (int k = 0; k < 8; ++k)
    acc = _mm256_add_epi32(acc, DotScaled(v[k], Load32(qs + 32 * k), sc[k]));
  return acc;
}

// One Q3_K row against T activation rows: each block's 3-bit quants and scales decoded once, each
// activation row's integer sums and block terms in the same order whatever T is (the same bits).
// With one row each vector is used as it is decoded (fewer live registers: decode's speed).
template <int T>
void RowsQ3_K(const BlockQ3_K* x, const BlockQ8_K* const* y, int64_t nb, float* out) {
  const __m256i low2 = _mm256_set1_epi8(3);
  const __m256i four = _mm256_set1_epi8(4);
  const PairShuffles shuffles;
  float sum[T] = {};
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i scales16 = UnpackQ3Scales(x[i].scales);
    const __m256i hm = Load32(x[i].hmask);
    __m256i v[8], sc[8];
    __m256i acc1 = _mm256_setzero_si256();  // T == 1
    for (int h = 0; h < 2; ++h) {
      const __m256i q = Load32(x[i].qs + 32 * h);
      const __m256i half_scales = DuplicateLane(scales16, h);
      for (int s = 0; s < 4; ++s) {
        const int k = 4 * h + s;
        const __m256i v2 = _mm256_and_si256(_mm256_srli_epi16(q, 2 * s), low2);
        const __m256i hb = _mm256_and_si256(BitSet(hm, static_cast<uint8_t>(1u << k)), four);
        v[k] = _mm256_or_si256(v2, hb);
        sc[k] = _mm256_shuffle_epi8(half_scales, shuffles.k[s]);
        if constexpr (T == 1)
          acc1 = _mm256_add_epi32(acc1, DotScaled(v[k], Load32(y[0][i].qs + 32 * k), sc[k]));
      }
    }
    const float xd = HalfToFloat(x[i].d);
    for (int t = 0; t < T; ++t) {
      const BlockQ8_K& yb = y[t][i];
      const __m256i acc = BlockSums<T>(acc1, v, sc, yb.qs);
      // Quants are stored as q + 4 (0..7): subtract 4 * sum scale * bsum.
      const int isum = HorizontalSum(acc) - 4 * WeightedBsums(yb.bsums, scales16);
      sum[t] += KBlockSum(xd * yb.d, 0.f, isum, 0);
    }
  }
  for (int t = 0; t < T; ++t) out[t] = sum[t];
}

// The same for Q2_K (2-bit quants, 4-bit scales and mins).
template <int T>
void RowsQ2_K(const BlockQ2_K* x, const BlockQ8_K* const* y, int64_t nb, float* out) {
  const __m256i low2 = _mm256_set1_epi8(3);
  const PairShuffles shuffles;
  float sum[T] = {};
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i packed =
        _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales)));
    const __m256i mins16 = _mm256_srli_epi16(packed, 4);
    const __m256i scales16 = _mm256_and_si256(packed, _mm256_set1_epi16(0xF));
    __m256i v[8], sc[8];
    __m256i acc1 = _mm256_setzero_si256();  // T == 1
    for (int h = 0; h < 2; ++h) {
      const __m256i q = Load32(x[i].qs + 32 * h);
      const __m256i half_scales = DuplicateLane(scales16, h);
      for (int s = 0; s < 4; ++s) {
        const int k = 4 * h + s;
        v[k] = _mm256_and_si256(_mm256_srli_epi16(q, 2 * s), low2);
        sc[k] = _mm256_shuffle_epi8(half_scales, shuffles.k[s]);
        if constexpr (T == 1)
          acc1 = _mm256_add_epi32(acc1, DotScaled(v[k], Load32(y[0][i].qs + 32 * k), sc[k]));
      }
    }
    const float xd = HalfToFloat(x[i].d), xdmin = HalfToFloat(x[i].dmin);
    for (int t = 0; t < T; ++t) {
      const BlockQ8_K& yb = y[t][i];
      const __m256i acc = BlockSums<T>(acc1, v, sc, yb.qs);
      const float yd = yb.d;
      sum[t] += KBlockSum(xd * yd, xdmin * yd, HorizontalSum(acc), WeightedBsums(yb.bsums, mins16));
    }
  }
  for (int t = 0; t < T; ++t) out[t] = sum[t];
}

// Rows(x, y, nb, out) over a matrix's rows for `count` (<= kMaxMultiActs) activation rows.
template <typename Block, template <int> class Rows>
void MatVecMultiK(const void* w, size_t row_stride_bytes, int64_t rows, const void* const* acts,
                  int count, int64_t n, float* const* outs) {
  const auto* base = static_cast<const uint8_t*>(w);
  auto run = [&](auto tag) {
    constexpr int T = decltype(tag)::value;
    const BlockQ8_K* y[T];
    for (int t = 0; t < T; ++t) y[t] = static_cast<const BlockQ8_K*>(acts[t]);
    for (int64_t r = 0; r < rows; ++r) {
      float part[T];
      Rows<T>::Run(reinterpret_cast<const Block*>(base + static_cast<size_t>(r) * row_stride_bytes),
                   y, n / kQK_K, part);
      for (int t = 0; t < T; ++t) outs[t][r] = part[t];
    }
  };
  switch (count) {
    case 1: run(std::integral_constant<int, 1>{}); return;
    case 2: run(std::integral_constant<int, 2>{}); return;
    case 3: run(std::integral_constant<int, 3>{}); return;
    default: run(std::integral_constant<int, 4>{}); return;
  }
}

template <int T>
struct Q3Rows {
  static void Run(const BlockQ3_K* x, const BlockQ8_K* const* y, int64_t nb, float* out) {
    RowsQ3_K<T>(x, y, nb, out);
  }
};
template <int T>
struct Q2Rows {
  static void Run(const BlockQ2_K* x, const BlockQ8_K* const* y, int64_t nb, float* out) {
    RowsQ2_K<T>(x, y, nb, out);
  }
};

float DotQ3_KAvx2(const void* w, const void* a, int64_t n) {
  const BlockQ8_K* y[1] = {static_cast<const BlockQ8_K*>(a)};
  float out;
  RowsQ3_K<1>(static_cast<const BlockQ3_K*>(w), y, n / kQK_K, &out);
  return out;
}

float DotQ2_KAvx2(const void* w, const void* a, int64_t n) {
  const BlockQ8_K* y[1] = {static_cast<const BlockQ8_K*>(a)};
  float out;
  RowsQ2_K<1>(static_cast<const BlockQ2_K*>(w), y, n / kQK_K, &out);
  return out;
}

}  // namespace

bool FillAvx2VecDot(KernelTable* table) {
  table->vec_dot[kIdF32] = DotF32Avx2;
  table->vec_dot[kIdF16] = DotHalfAvx2<false>;
  table->vec_dot[kIdBF16] = DotHalfAvx2<true>;
  table->vec_dot[kIdQ8_0] = DotQ8_0Avx2;
  table->vec_dot[kIdQ8_K] = DotQ8_KAvx2;
  table->vec_dot[kIdQ2_K] = DotQ2_KAvx2;
  table->vec_dot[kIdQ3_K] = DotQ3_KAvx2;
  table->mat_vec_multi[kIdQ2_K] = MatVecMultiK<BlockQ2_K, Q2Rows>;
  table->mat_vec_multi[kIdQ3_K] = MatVecMultiK<BlockQ3_K, Q3Rows>;
  table->vec_dot[kIdQ4_K] = DotQ4_KAvx2;
  table->vec_dot[kIdQ5_K] = DotQ5_KAvx2;
  table->vec_dot[kIdQ6_K] = DotQ6_KAvx2;
  return true;
}

}  // namespace colibri::quant::internal

#else  // not x86

namespace colibri::quant::internal {
bool FillAvx2VecDot(KernelTable*) { return false; }
}  // namespace colibri::quant::internal

#endif
