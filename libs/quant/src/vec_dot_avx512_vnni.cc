// AVX-512 VNNI matrix-vector kernels for the 32-element block formats that pair with Q8_0
// activations: Q8_0, Q4_0, Q5_0, IQ4_NL and MXFP4. Built with the AVX-512 F/BW/VL + VNNI flags
// and only called after dispatch.cc has seen those features. See kernels.h for what this file
// may include.
//
// vpdpbusd multiplies unsigned by signed bytes, so each format's 32 weights of a block are
// decoded to unsigned bytes q + offset in element order (Q8_0: the sign bit flipped, offset 128;
// Q4_0 / Q5_0: the raw nibbles, offset 8 / 16; IQ4_NL / MXFP4: a codebook shifted by 128 looked
// up with one pshufb) and one vpdpbusd per block, started from a per-block bias vector
// (-offset * the activations' 4-byte lane sums, made once per call when the activations are
// repacked), leaves the exact integer products in 8 int32 lanes. Eight blocks' lanes are
// reduced together (one vector of 8 exact block sums), each block's sum goes through the scalar
// reference's float expression (vector multiplies, the same IEEE operations), and the terms
// are added in block order; MatVec does that for 8 rows at once, their 8 in-order sums in the
// lanes of one vector (AddRowsInOrder), so the float dependency chain is shared by 8 rows. The
// results are the reference's exact bits, in VecDot and MatVec alike.
#include "kernels.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#include "avx512_helpers.h"
#include "colibri/quant/blocks.h"

namespace colibri::quant::internal {
namespace {

// Activations are repacked in segments of up to this many blocks (4096 elements, ~8.5 KiB on
// the stack) whatever the row length.
constexpr int64_t kSegmentBlocks = 128;
constexpr int kPrefetchBytes = 1024;

// One segment of Q8_0 activations: per block its 32 quants (aligned), the OffsetBias vector
// for the weight format's offset, and its scale as a float.
struct Q8_0Packed {
  alignas(32) int8_t qs[kSegmentBlocks][32];
  alignas(32) int32_t bias[kSegmentBlocks][8];
  float d[kSegmentBlocks];
};

void RepackQ8_0(const BlockQ8_0* y, int64_t nb, int offset, Q8_0Packed* p) {
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i q = Load32(y[i].qs);
    _mm256_store_si256(reinterpret_cast<__m256i*>(p->qs[i]), q);
    _mm256_store_si256(reinterpret_cast<__m256i*>(p->bias[i]), OffsetBias(offset, q));
    p->d[i] = HalfToFloat(y[i].d);
  }
}

// Per format: the block type, the offset, the 32 quants as unsigned bytes q + offset in
// element order, and the block's scale (what the scalar reference multiplies the activation
// scale with), alone and for 8 consecutive blocks.
struct Q4_0Weights {
  using Block = BlockQ4_0;
  static constexpr int kOffset = 8;
  __m256i Quants(const Block& b) const { return Nibbles(b.qs); }
  static float Scale(const Block& b) { return HalfToFloat(b.d); }
  static __m256 Scales8(const Block* b) { return GatherHalf8(b, sizeof(Block)); }
};

struct Q5_0Weights {
  using Block = BlockQ5_0;
  static constexpr int kOffset = 16;
  __m256i Quants(const Block& b) const { return _mm256_or_si256(Nibbles(b.qs), FifthBits(b.qh)); }
  static float Scale(const Block& b) { return HalfToFloat(b.d); }
  static __m256 Scales8(const Block* b) { return GatherHalf8(b, sizeof(Block)); }
};

// A 16-entry int8 codebook shifted by 128 into unsigned bytes (|entry| <= 127: no wrap).
template <const int8_t* kBook>
struct ShiftedBook {
  __m256i book = _mm256_xor_si256(BroadcastTable(kBook), _mm256_set1_epi8(-128));
};

struct IQ4_NLWeights : ShiftedBook<kIq4nlValues> {
  using Block = BlockIQ4_NL;
  static constexpr int kOffset = 128;
  __m256i Quants(const Block& b) const { return LookupNibbles(book, b.qs); }
  static float Scale(const Block& b) { return HalfToFloat(b.d); }
  static __m256 Scales8(const Block* b) { return GatherHalf8(b, sizeof(Block)); }
};

struct MXFP4Weights : ShiftedBook<kMxfp4Values> {
  using Block = BlockMXFP4;
  static constexpr int kOffset = 128;
  __m256i Quants(const Block& b) const { return LookupNibbles(book, b.qs); }
  static float Scale(const Block& b) { return E8M0HalfScale(b.e); }
  static __m256 Scales8(const Block* b) { return GatherE8M0HalfScale8(b, sizeof(Block)); }
};

// The block's exact integer dot product, as 8 int32 partial sums.
template <class W>
inline __m256i BlockSums(const W& w, const typename W::Block& x, const Q8_0Packed& p, int64_t i) {
  const __m256i bias = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.bias[i]));
  const __m256i y = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.qs[i]));
  return DotBytes(bias, w.Quants(x), y);
}

// The same float tail as the scalar kernels (legacy_quants.cc, iquants.cc, vec_dot.cc).
template <class W>
inline float BlockTerm(const typename W::Block& x, const Q8_0Packed& p, int64_t i, int32_t isum) {
  return static_cast<float>(isum) * (W::Scale(x) * p.d[i]);
}

// The products float(isum) * (scale * activation scale) of 8 consecutive blocks, as the scalar
// tail computes them one by one.
template <class W>
inline __m256 BlockTerms8(const W& w, const typename W::Block* x, const Q8_0Packed& p, int64_t i) {
  __m256i s[8];
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) s[k] = BlockSums(w, x[i + k], p, i + k);
  const __m256 scale = _mm256_mul_ps(W::Scales8(x + i), _mm256_loadu_ps(p.d + i));
  return _mm256_mul_ps(_mm256_cvtepi32_ps(ReduceEach8(s)), scale);
}

// sum[r] plus row r's block terms in block order, for 8 rows at once (a row longer than one
// segment continues from the earlier segments' sums, as the scalar loop does).
template <class W>
void Rows8(const W& w, const typename W::Block* const x[8], const typename W::Block* const next[8],
           const Q8_0Packed& p, int64_t nb, float sum[8]) {
  __m256 acc = _mm256_loadu_ps(sum);
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    // The same blocks of the next 8 rows (contiguous with these in a matrix): a whole 8-row group
    // ahead, one stream per row being too many for the hardware prefetchers.
    for (int r = 0; r < 8; ++r) {
      for (size_t off = 0; off < 8 * sizeof(x[0][0]); off += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(next[r] + i) + off, _MM_HINT_T0);
      }
    }
    __m256 terms[8];
    for (int r = 0; r < 8; ++r) terms[r] = BlockTerms8(w, x[r], p, i);
    acc = AddRowsInOrder(acc, terms);
  }
  _mm256_storeu_ps(sum, acc);
  for (int r = 0; r < 8; ++r) {
    for (int64_t j = i; j < nb; ++j) sum[r] += BlockTerm<W>(x[r][j], p, j, HorizontalSum(BlockSums(w, x[r][j], p, j)));
  }
}

// The same for one row.
template <class W>
float Row(const W& w, const typename W::Block* x, const Q8_0Packed& p, int64_t nb, float sum) {
  alignas(32) float terms[8];
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    for (size_t off = 0; off < 8 * sizeof(x[0]); off += 64) {
      PrefetchAhead(reinterpret_cast<const char*>(x + i) + off, kPrefetchBytes);
    }
    _mm256_store_ps(terms, BlockTerms8(w, x, p, i));
    for (float t : terms) sum += t;
  }
  for (; i < nb; ++i) sum += BlockTerm<W>(x[i], p, i, HorizontalSum(BlockSums(w, x[i], p, i)));
  return sum;
}

template <class W>
void MatVecBlock32(const void* w, size_t row_stride_bytes, int64_t rows, const void* act, int64_t n,
                   float* out) {
  using Block = typename W::Block;
  const int64_t nb = n / 32;
  const auto* y = static_cast<const BlockQ8_0*>(act);
  const auto* base = static_cast<const uint8_t*>(w);
  auto row = [&](int64_t r, int64_t b0) {
    return reinterpret_cast<const Block*>(base + static_cast<size_t>(r) * row_stride_bytes) + b0;
  };
  const W weights;
  Q8_0Packed p;
  for (int64_t b0 = 0; b0 < nb || b0 == 0; b0 += kSegmentBlocks) {
    const int64_t seg = nb - b0 < kSegmentBlocks ? nb - b0 : kSegmentBlocks;
    RepackQ8_0(y + b0, seg, W::kOffset, &p);
    int64_t r = 0;
    for (; r + 8 <= rows; r += 8) {
      const Block* x[8];
      const Block* next[8];
      float sum[8];
      for (int k = 0; k < 8; ++k) {
        x[k] = row(r + k, b0);
        next[k] = row(r + 8 + k < rows ? r + 8 + k : r + k, b0);
        sum[k] = b0 == 0 ? 0.0f : out[r + k];
      }
      Rows8(weights, x, next, p, seg, sum);
      for (int k = 0; k < 8; ++k) out[r + k] = sum[k];
    }
    for (; r < rows; ++r) out[r] = Row(weights, row(r, b0), p, seg, b0 == 0 ? 0.0f : out[r]);
  }
}

// Q8_0 straight from the activation blocks (a repack only costs here: it doubles the bytes the
// loop reads from L1 while the weights stream through it): |w| * (y with w's sign) per
// vpdpbusd, exact also for w = -128 (|w| = 128 as an unsigned byte); each block's 8 lane sums
// times its scale accumulate in float lanes, as the AVX2 kernel does (vec_dot.h: Q8_0 differs
// from the reference by float summation order in every SIMD set).
float RowQ8_0(const BlockQ8_0* x, const BlockQ8_0* y, int64_t nb) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  auto term = [&](int64_t i, __m256 acc) {
    const __m256i q = Load32(x[i].qs);
    const __m256i isum = DotBytes(_mm256_setzero_si256(), _mm256_abs_epi8(q), _mm256_sign_epi8(Load32(y[i].qs), q));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(HalfToFloat(x[i].d) * HalfToFloat(y[i].d)), acc);
  };
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    acc0 = term(i, acc0);
    acc1 = term(i + 1, acc1);
  }
  if (i < nb) acc0 = term(i, acc0);
  return HorizontalSum(_mm256_add_ps(acc0, acc1));
}

void MatVecQ8_0(const void* w, size_t row_stride_bytes, int64_t rows, const void* act, int64_t n, float* out) {
  const auto* base = static_cast<const uint8_t*>(w);
  for (int64_t r = 0; r < rows; ++r) {
    out[r] = RowQ8_0(reinterpret_cast<const BlockQ8_0*>(base + static_cast<size_t>(r) * row_stride_bytes),
                     static_cast<const BlockQ8_0*>(act), n / 32);
  }
}

float DotQ8_0(const void* w, const void* act, int64_t n) {
  float out = 0;
  MatVecQ8_0(w, 0, 1, act, n, &out);
  return out;
}

template <class W>
float DotBlock32(const void* w, const void* act, int64_t n) {
  float out = 0;
  MatVecBlock32<W>(w, 0, 1, act, n, &out);
  return out;
}

template <class W>
void Set(KernelTable* table, uint32_t id) {
  table->vec_dot[id] = DotBlock32<W>;
  table->mat_vec[id] = MatVecBlock32<W>;
}

}  // namespace

bool FillAvx512VnniVecDot(KernelTable* table) {
  table->vec_dot[kIdQ8_0] = DotQ8_0;
  table->mat_vec[kIdQ8_0] = MatVecQ8_0;
  Set<Q4_0Weights>(table, 2);
  Set<Q5_0Weights>(table, 6);
  Set<IQ4_NLWeights>(table, 20);
  Set<MXFP4Weights>(table, 39);
  return true;
}

}  // namespace colibri::quant::internal

#else  // not x86

namespace colibri::quant::internal {
bool FillAvx512VnniVecDot(KernelTable*) { return false; }
}  // namespace colibri::quant::internal

#endif
