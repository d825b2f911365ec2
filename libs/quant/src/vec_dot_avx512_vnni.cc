// AVX-512 VNNI matrix-vector kernels for the 32-element block formats that pair with Q8_0
// activations (Q8_0, Q4_0, Q5_0, IQ4_NL, MXFP4) and for IQ4_XS (Q8_K activations). Built with
// the AVX-512 F/BW/VL + VNNI flags and only called after dispatch.cc has seen those features.
// See kernels.h for what this file may include.
//
// Each block's 32 weights are decoded to signed bytes in element order (Q4_0 / Q5_0: nibbles
// minus 8 / 16; IQ4_NL / MXFP4: one pshufb into the codebook) and one vpdpbusd of |w| with the
// activations carrying w's sign leaves the exact integer products in 8 int32 lanes; the
// activation blocks are read as they are (a repack doubled the bytes read from L1 per weight
// byte and lost to AVX2 when the weights stream from DRAM).
//
// Q4_0, Q5_0, IQ4_NL, MXFP4 and IQ4_XS (its 8 groups of 32 per super-block): eight blocks' (or
// groups') lanes are reduced together (one vector of 8 exact sums), each sum goes through the
// scalar reference's float expression (vector
// multiplies, the same IEEE operations), and the terms are added in block order; MatVec does
// that for 8 rows at once, their 8 in-order sums in the lanes of one vector (AddRowsInOrder),
// so the float dependency chain is shared by 8 rows. The results are the reference's exact
// bits, in VecDot and MatVec alike.
//
// Q8_0: each block's lane sums times its scale accumulate in float lanes, as its AVX2 kernel
// does (cheaper per block; vec_dot.h: Q8_0 differs from the reference by float summation
// order in every SIMD set).
#include "kernels.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <string.h>

#include "avx512_helpers.h"
#include "colibri/quant/blocks.h"

namespace colibri::quant::internal {
namespace {

constexpr int kPrefetchBytes = 1024;

// Per 32-element format: the block type, the 32 weights as signed bytes in element order, and the
// block's scale (what the scalar reference multiplies the activation scale with), alone and for 8
// consecutive blocks.
struct Q4_0Weights {
  using Block = BlockQ4_0;
  __m256i Quants(const Block& b) const {
    return _mm256_sub_epi8(Nibbles(b.qs), _mm256_set1_epi8(8));
  }
  static float Scale(const Block& b) { return HalfToFloat(b.d); }
  static __m256 Scales8(const Block* b) { return GatherHalf8(b, sizeof(Block)); }
};

struct Q5_0Weights {
  using Block = BlockQ5_0;
  __m256i Quants(const Block& b) const {
    return _mm256_sub_epi8(_mm256_or_si256(Nibbles(b.qs), FifthBits(b.qh)), _mm256_set1_epi8(16));
  }
  static float Scale(const Block& b) { return HalfToFloat(b.d); }
  static __m256 Scales8(const Block* b) { return GatherHalf8(b, sizeof(Block)); }
};

// A 16-entry int8 codebook in both lanes.
template <const int8_t* kBook>
struct Book {
  __m256i book = BroadcastTable(kBook);
};

struct IQ4_NLWeights : Book<kIq4nlValues> {
  using Block = BlockIQ4_NL;
  __m256i Quants(const Block& b) const { return LookupNibbles(book, b.qs); }
  static float Scale(const Block& b) { return HalfToFloat(b.d); }
  static __m256 Scales8(const Block* b) { return GatherHalf8(b, sizeof(Block)); }
};

struct MXFP4Weights : Book<kMxfp4Values> {
  using Block = BlockMXFP4;
  __m256i Quants(const Block& b) const { return LookupNibbles(book, b.qs); }
  static float Scale(const Block& b) { return E8M0HalfScale(b.e); }
  static __m256 Scales8(const Block* b) { return GatherE8M0HalfScale8(b, sizeof(Block)); }
};

// The exact integer dot product of 32 signed weights with 32 activations, as 8 int32 partial
// sums: |w| * (y with w's sign) per vpdpbusd (|w| <= 128 as an unsigned byte: exact for any w).
inline __m256i SignedSums(__m256i w, const int8_t* y) {
  return DotBytes(_mm256_setzero_si256(), _mm256_abs_epi8(w), _mm256_sign_epi8(Load32(y), w));
}

// The kernels below are written once over a "kernel" K: its weight and activation block types,
// kElems elements per block, and Terms8, the 8 float terms (in the scalar reference's order and
// expressions) of kChunk consecutive blocks; TailTerm, where kChunk > 1, one block's term.

// The 32-element formats: 8 blocks per chunk, one term per block.
template <class W>
struct Block32 {
  using Block = typename W::Block;
  using Act = BlockQ8_0;
  static constexpr int kElems = 32, kChunk = 8;
  W w;

  // float(isum) * (scale * activation scale) of 8 blocks (legacy_quants.cc, iquants.cc).
  __m256 Terms8(const Block* x, const Act* y) const {
    __m256i s[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) s[k] = SignedSums(w.Quants(x[k]), y[k].qs);
    const __m256 scale = _mm256_mul_ps(W::Scales8(x), GatherHalf8(y, sizeof(Act)));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(ReduceEach8(s)), scale);
  }
  float TailTerm(const Block& x, const Act& y) const {
    const int32_t isum = HorizontalSum(SignedSums(w.Quants(x), y.qs));
    return static_cast<float>(isum) * (W::Scale(x) * HalfToFloat(y.d));
  }
  // Terms8 against T activation rows (y[t] at the same blocks), the 8 blocks decoded once.
  template <int T>
  void TermsMulti(const Block* x, const Act* const* y, __m256 out[T]) const {
    if constexpr (T == 1) {
      out[0] = Terms8(x, y[0]);  // decoded and used block by block: fewer live registers
      return;
    }
    __m256i q[8], mag[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      q[k] = w.Quants(x[k]);
      mag[k] = _mm256_abs_epi8(q[k]);
    }
    const __m256 ws = W::Scales8(x);
    for (int t = 0; t < T; ++t) {
      __m256i s[8];
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k)
        s[k] = DotBytes(_mm256_setzero_si256(), mag[k], _mm256_sign_epi8(Load32(y[t][k].qs), q[k]));
      const __m256 scale = _mm256_mul_ps(ws, GatherHalf8(y[t], sizeof(Act)));
      out[t] = _mm256_mul_ps(_mm256_cvtepi32_ps(ReduceEach8(s)), scale);
    }
  }
};

// IQ4_XS: one super-block per chunk, its 8 groups of 32 the 8 terms
// d4d8 * float(ls) * float(isum) (iquants.cc).
struct IQ4_XSKernel : Book<kIq4nlValues> {
  using Block = BlockIQ4_XS;
  using Act = BlockQ8_K;
  static constexpr int kElems = 256, kChunk = 1;

  // The 6-bit group scales (blocks.h) as 8 int32 lanes, minus 32.
  static __m256i GroupScales(const Block* x) {
    uint32_t low4;
    memcpy(&low4, x->scales_l, sizeof(low4));
    const __m256i low =
        _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(low4)),
                                           _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                         _mm256_set1_epi32(0x0f));
    const __m256i high =
        _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(x->scales_h),
                                           _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                         _mm256_set1_epi32(3));
    return _mm256_sub_epi32(_mm256_or_si256(low, _mm256_slli_epi32(high, 4)),
                            _mm256_set1_epi32(32));
  }

  __m256 Terms8(const Block* x, const Act* y) const {
    __m256i s[8];
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g)
      s[g] = SignedSums(LookupNibbles(book, x->qs + 16 * g), y->qs + 32 * g);
    const __m256 scale =
        _mm256_mul_ps(_mm256_set1_ps(HalfToFloat(x->d) * y->d), _mm256_cvtepi32_ps(GroupScales(x)));
    return _mm256_mul_ps(scale, _mm256_cvtepi32_ps(ReduceEach8(s)));
  }
  float TailTerm(const Block&, const Act&) const { return 0.0f; }  // (kChunk 1: no tail)
  // Terms8 against T activation rows, the 8 groups decoded once.
  template <int T>
  void TermsMulti(const Block* x, const Act* const* y, __m256 out[T]) const {
    if constexpr (T == 1) {
      out[0] = Terms8(x, y[0]);
      return;
    }
    __m256i q[8], mag[8];
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      q[g] = LookupNibbles(book, x->qs + 16 * g);
      mag[g] = _mm256_abs_epi8(q[g]);
    }
    const __m256 ls = _mm256_cvtepi32_ps(GroupScales(x));
    const float xd = HalfToFloat(x->d);
    for (int t = 0; t < T; ++t) {
      __m256i s[8];
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g)
        s[g] = DotBytes(_mm256_setzero_si256(), mag[g],
                        _mm256_sign_epi8(Load32(y[t]->qs + 32 * g), q[g]));
      const __m256 scale = _mm256_mul_ps(_mm256_set1_ps(xd * y[t]->d), ls);
      out[t] = _mm256_mul_ps(scale, _mm256_cvtepi32_ps(ReduceEach8(s)));
    }
  }
};

// One row's terms added in order (the rows past the last group of 8).
template <class K>
float Row(const K& k, const typename K::Block* x, const typename K::Act* y, int64_t nb) {
  alignas(32) float terms[8];
  float sum = 0;
  int64_t i = 0;
  for (; i + K::kChunk <= nb; i += K::kChunk) {
    for (size_t off = 0; off < K::kChunk * sizeof(x[0]); off += 64) {
      PrefetchAhead(reinterpret_cast<const char*>(x + i) + off, kPrefetchBytes);
    }
    _mm256_store_ps(terms, k.Terms8(x + i, y + i));
    for (float t : terms) sum += t;
  }
  for (; i < nb; ++i) sum += k.TailTerm(x[i], y[i]);
  return sum;
}

// outs[t][r] = dot(row r, acts[t]) for T activation rows: 8 weight rows at a time, each weight
// block decoded once for all T, each row's terms added in block order for 8 rows at once
// (AddRowsInOrder), the rows past the last group of 8 one by one (Row): every output the
// scalar reference's bits, whatever T is.
template <class K, int T>
void MatVecMultiExactT(const void* w, size_t row_stride_bytes, int64_t rows,
                       const void* const* acts, int64_t n, float* const* outs) {
  using Block = typename K::Block;
  using Act = typename K::Act;
  const int64_t nb = n / K::kElems;
  const Act* y[T];
  for (int t = 0; t < T; ++t) y[t] = static_cast<const Act*>(acts[t]);
  const auto* base = static_cast<const uint8_t*>(w);
  auto row = [&](int64_t r) {
    return reinterpret_cast<const Block*>(base + static_cast<size_t>(r) * row_stride_bytes);
  };
  const K kernel;
  int64_t r = 0;
  for (; r + 8 <= rows; r += 8) {
    const Block* x[8];
    const Block* next[8];
    for (int i = 0; i < 8; ++i) {
      x[i] = row(r + i);
      next[i] = row(r + 8 + i < rows ? r + 8 + i : r + i);
    }
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + K::kChunk <= nb; i += K::kChunk) {
      for (int j = 0; j < 8; ++j) {
        for (size_t off = 0; off < K::kChunk * sizeof(Block); off += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(next[j] + i) + off, _MM_HINT_T0);
        }
      }
      const Act* yi[T];
      for (int t = 0; t < T; ++t) yi[t] = y[t] + i;
      __m256 terms[T][8];
      for (int j = 0; j < 8; ++j) {
        __m256 per_act[T];
        kernel.template TermsMulti<T>(x[j] + i, yi, per_act);
        for (int t = 0; t < T; ++t) terms[t][j] = per_act[t];
      }
      for (int t = 0; t < T; ++t) acc[t] = AddRowsInOrder(acc[t], terms[t]);
    }
    for (int t = 0; t < T; ++t) {
      float sum[8];
      _mm256_storeu_ps(sum, acc[t]);
      for (int j = 0; j < 8; ++j) {
        for (int64_t b = i; b < nb; ++b) sum[j] += kernel.TailTerm(x[j][b], y[t][b]);
        outs[t][r + j] = sum[j];
      }
    }
  }
  for (; r < rows; ++r) {
    for (int t = 0; t < T; ++t) outs[t][r] = Row(kernel, row(r), y[t], nb);
  }
}

template <class K>
void MatVecExact(const void* w, size_t row_stride_bytes, int64_t rows, const void* act, int64_t n,
                 float* out) {
  MatVecMultiExactT<K, 1>(w, row_stride_bytes, rows, &act, n, &out);
}

template <class K>
void MatVecMultiExact(const void* w, size_t row_stride_bytes, int64_t rows, const void* const* acts,
                      int count, int64_t n, float* const* outs) {
  switch (count) {
    case 1: MatVecExact<K>(w, row_stride_bytes, rows, acts[0], n, outs[0]); return;
    case 2: MatVecMultiExactT<K, 2>(w, row_stride_bytes, rows, acts, n, outs); return;
    case 3: MatVecMultiExactT<K, 3>(w, row_stride_bytes, rows, acts, n, outs); return;
    default: MatVecMultiExactT<K, 4>(w, row_stride_bytes, rows, acts, n, outs); return;
  }
}

float RowQ8_0(const BlockQ8_0* x, const BlockQ8_0* y, int64_t nb) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  auto term = [&](int64_t i, __m256 acc) {
    const __m256i isum = SignedSums(Load32(x[i].qs), y[i].qs);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum),
                           _mm256_set1_ps(HalfToFloat(x[i].d) * HalfToFloat(y[i].d)), acc);
  };
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    acc0 = term(i, acc0);
    acc1 = term(i + 1, acc1);
  }
  if (i < nb) acc0 = term(i, acc0);
  return HorizontalSum(_mm256_add_ps(acc0, acc1));
}

void MatVecQ8_0(const void* w, size_t row_stride_bytes, int64_t rows, const void* act, int64_t n,
                float* out) {
  const auto* base = static_cast<const uint8_t*>(w);
  for (int64_t r = 0; r < rows; ++r) {
    out[r] = RowQ8_0(
        reinterpret_cast<const BlockQ8_0*>(base + static_cast<size_t>(r) * row_stride_bytes),
        static_cast<const BlockQ8_0*>(act), n / 32);
  }
}

// RowQ8_0 for T activation rows: each weight block loaded once, each row's sums in RowQ8_0's
// order (the same bits).
template <int T>
void RowsQ8_0(const BlockQ8_0* x, const BlockQ8_0* const* y, int64_t nb, float* out) {
  __m256 acc0[T], acc1[T];
  for (int t = 0; t < T; ++t) acc0[t] = acc1[t] = _mm256_setzero_ps();
  auto terms = [&](int64_t i, __m256* acc) {
    const __m256i q = Load32(x[i].qs);
    const __m256i mag = _mm256_abs_epi8(q);
    const float xd = HalfToFloat(x[i].d);
    for (int t = 0; t < T; ++t) {
      const __m256i isum =
          DotBytes(_mm256_setzero_si256(), mag, _mm256_sign_epi8(Load32(y[t][i].qs), q));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum),
                               _mm256_set1_ps(xd * HalfToFloat(y[t][i].d)), acc[t]);
    }
  };
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    terms(i, acc0);
    terms(i + 1, acc1);
  }
  if (i < nb) terms(i, acc0);
  for (int t = 0; t < T; ++t) out[t] = HorizontalSum(_mm256_add_ps(acc0[t], acc1[t]));
}

template <int T>
void MatVecMultiQ8_0T(const void* w, size_t row_stride_bytes, int64_t rows, const void* const* acts,
                      int64_t n, float* const* outs) {
  const BlockQ8_0* y[T];
  for (int t = 0; t < T; ++t) y[t] = static_cast<const BlockQ8_0*>(acts[t]);
  const auto* base = static_cast<const uint8_t*>(w);
  for (int64_t r = 0; r < rows; ++r) {
    float part[T];
    RowsQ8_0<T>(
        reinterpret_cast<const BlockQ8_0*>(base + static_cast<size_t>(r) * row_stride_bytes), y,
        n / 32, part);
    for (int t = 0; t < T; ++t) outs[t][r] = part[t];
  }
}

void MatVecMultiQ8_0(const void* w, size_t row_stride_bytes, int64_t rows, const void* const* acts,
                     int count, int64_t n, float* const* outs) {
  switch (count) {
    case 1: MatVecQ8_0(w, row_stride_bytes, rows, acts[0], n, outs[0]); return;
    case 2: MatVecMultiQ8_0T<2>(w, row_stride_bytes, rows, acts, n, outs); return;
    case 3: MatVecMultiQ8_0T<3>(w, row_stride_bytes, rows, acts, n, outs); return;
    default: MatVecMultiQ8_0T<4>(w, row_stride_bytes, rows, acts, n, outs); return;
  }
}

float DotQ8_0(const void* w, const void* act, int64_t n) {
  float out = 0;
  MatVecQ8_0(w, 0, 1, act, n, &out);
  return out;
}

template <class K>
float DotExact(const void* w, const void* act, int64_t n) {
  float out = 0;
  MatVecExact<K>(w, 0, 1, act, n, &out);
  return out;
}

template <class K>
void Set(KernelTable* table, uint32_t id) {
  table->vec_dot[id] = DotExact<K>;
  table->mat_vec[id] = MatVecExact<K>;
  table->mat_vec_multi[id] = MatVecMultiExact<K>;
}

}  // namespace

bool FillAvx512VnniVecDot(KernelTable* table) {
  table->vec_dot[kIdQ8_0] = DotQ8_0;
  table->mat_vec[kIdQ8_0] = MatVecQ8_0;
  table->mat_vec_multi[kIdQ8_0] = MatVecMultiQ8_0;
  Set<Block32<Q4_0Weights>>(table, 2);
  Set<Block32<Q5_0Weights>>(table, 6);
  Set<Block32<IQ4_NLWeights>>(table, 20);
  Set<IQ4_XSKernel>(table, 23);
  Set<Block32<MXFP4Weights>>(table, 39);
  return true;
}

}  // namespace colibri::quant::internal

#else  // not x86

namespace colibri::quant::internal {
bool FillAvx512VnniVecDot(KernelTable*) { return false; }
}  // namespace colibri::quant::internal

#endif
