// AVX-512 (F + BW + VL, with AVX2/FMA/F16C) matrix-vector kernels. Built with those flags and
// only called after dispatch.cc has seen the features. See kernels.h for what this file may
// include.
//
// Q4_K (the decode workhorse): the Q8_K activations are first reordered once per call so that
// each 64-byte activation vector lines up with the nibbles of one 64-byte weight vector (see
// RepackQ8_K), which leaves per super-block: two weight loads, the nibble split, four
// maddubs + madd against per-group scale vectors made with one vpermw each, and one FMA into
// float lanes with the block's scale. The per-block float terms accumulate in vector lanes
// and are summed once per row, so results differ from the scalar reference by float
// summation order only (vec_dot.h).
#include "kernels.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <string.h>

#include <type_traits>

#include "avx512_helpers.h"
#include "colibri/quant/blocks.h"

namespace colibri::quant::internal {
namespace {

// The Q8_K activations of one row, reordered for the Q4_K kernel. Per super-block, 256 bytes:
// for each half j (elements 128j..128j+127) the 64 bytes that pair with the low nibbles of
// weight bytes 64j..64j+63 (elements 128j+0..31 and 128j+64..95), then the 64 that pair with
// the high nibbles (128j+32..63 and 128j+96..127). d and the bsum pairs per 32-group ride
// alongside. Rows are processed in segments of up to kSegmentBlocks super-blocks so this
// lives on the stack (17 KiB) whatever the row length.
constexpr int64_t kSegmentBlocks = 64;
constexpr int kPrefetchBytes = 1024;

struct Q8KPacked {
  alignas(64) int8_t qs[kSegmentBlocks * 256];
  float d[kSegmentBlocks];
  int16_t gsum[kSegmentBlocks * 8];  // bsums[2g] + bsums[2g + 1] (|.| <= 32 * 127)
};

void RepackQ8_K(const BlockQ8_K* y, int64_t nb, Q8KPacked* p) {
  for (int64_t i = 0; i < nb; ++i) {
    int8_t* dst = p->qs + i * 256;
    for (int j = 0; j < 2; ++j) {
      const int8_t* src = y[i].qs + 128 * j;
      memcpy(dst + 128 * j, src, 32);
      memcpy(dst + 128 * j + 32, src + 64, 32);
      memcpy(dst + 128 * j + 64, src + 32, 32);
      memcpy(dst + 128 * j + 96, src + 96, 32);
    }
    p->d[i] = y[i].d;
    for (int g = 0; g < 8; ++g) {
      p->gsum[i * 8 + g] = static_cast<int16_t>(y[i].bsums[2 * g] + y[i].bsums[2 * g + 1]);
    }
  }
}

// The Q4_K scales and mins of a block (blocks.h: 12 bytes of 6-bit fields) as 16 int16 lanes
// [scale 0..7, min 0..7]. Reads 16 bytes from `scales` (the block's quants follow them).
inline __m256i UnpackScalesMinsQ4_K(const uint8_t* scales) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales));
  // 32-bit words a (scales 0-3 + top bits of 4-7), b (same for mins), c (low nibbles of 4-7).
  const __m128i low6 = _mm_and_si128(v, _mm_set1_epi32(0x3f3f3f3f));  // [sc0-3, m0-3]
  const __m128i c = _mm_shuffle_epi32(v, 0xaa);                       // [c, c, ..]
  const __m128i c_nib = _mm_and_si128(_mm_srlv_epi32(c, _mm_setr_epi32(0, 4, 0, 0)),
                                      _mm_set1_epi32(0x0f0f0f0f));  // [c&f, c>>4&f]
  const __m128i top2 = _mm_and_si128(_mm_srli_epi32(v, 2), _mm_set1_epi32(0x30303030));
  const __m128i high = _mm_or_si128(c_nib, top2);        // [sc4-7, m4-7]
  const __m128i bytes = _mm_unpacklo_epi32(low6, high);  // sc0-3, sc4-7, m0-3, m4-7
  return _mm256_cvtepu8_epi16(bytes);
}

struct Q4KConsts {
  __m512i low4 = _mm512_set1_epi8(0x0f);
  __m512i idx[4] = {PairIndex(0, 2), PairIndex(1, 3), PairIndex(4, 6), PairIndex(5, 7)};
  // Q5_K: the fifth bit of the four nibble vectors (lo0, hi0, lo1, hi1) is bit (4j + 2c + half)
  // of qh[l] (blocks.h); these 16-bit-lane shifts bring it to bit 4 in each 256-bit half.
  __m512i bit4 = _mm512_set1_epi8(0x10);
  __m512i shl_lo0 = PairIndex(4, 2), shl_hi0 = PairIndex(3, 1);
  __m512i shr_lo1 = PairIndex(0, 2), shr_hi1 = PairIndex(1, 3);
};

// Q4_K, or Q5_K (same scales and nibbles plus a fifth bit per quant from qh), for T activation
// rows at once: the weight block's scales, mins and nibbles are decoded once, then each row
// takes its own operations in the same order whatever T is (so T = 4 gives T = 1's bits).
template <typename Block, int T>
inline void RowsQ45_K(const Block* x, const Q8KPacked* const* p, int64_t nb, const Q4KConsts& k,
                      float* out) {
  constexpr bool kFifthBit = std::is_same_v<Block, BlockQ5_K>;
  __m512 acc[T];
  __m128 acc_min[T];
  for (int t = 0; t < T; ++t) {
    acc[t] = _mm512_setzero_ps();
    acc_min[t] = _mm_setzero_ps();
  }
  for (int64_t i = 0; i < nb; ++i) {
    PrefetchAhead(x + i, kPrefetchBytes);
    PrefetchAhead(x + i, kPrefetchBytes + 64);
    const float xd = _cvtsh_ss(x[i].d);
    const float xdmin = _cvtsh_ss(x[i].dmin);
    const __m256i sm = UnpackScalesMinsQ4_K(x[i].scales);
    const __m512i sm512 = _mm512_castsi256_si512(sm);
    const __m128i mins = _mm256_extracti128_si256(sm, 1);
    const __m512i w0 = _mm512_loadu_si512(x[i].qs);
    const __m512i w1 = _mm512_loadu_si512(x[i].qs + 64);
    __m512i lo0 = _mm512_and_si512(w0, k.low4);
    __m512i hi0 = _mm512_and_si512(_mm512_srli_epi16(w0, 4), k.low4);
    __m512i lo1 = _mm512_and_si512(w1, k.low4);
    __m512i hi1 = _mm512_and_si512(_mm512_srli_epi16(w1, 4), k.low4);
    if constexpr (kFifthBit) {
      const __m512i qh =
          _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qh)));
      lo0 = _mm512_or_si512(lo0, _mm512_and_si512(_mm512_sllv_epi16(qh, k.shl_lo0), k.bit4));
      hi0 = _mm512_or_si512(hi0, _mm512_and_si512(_mm512_sllv_epi16(qh, k.shl_hi0), k.bit4));
      lo1 = _mm512_or_si512(lo1, _mm512_and_si512(_mm512_srlv_epi16(qh, k.shr_lo1), k.bit4));
      hi1 = _mm512_or_si512(hi1, _mm512_and_si512(_mm512_srlv_epi16(qh, k.shr_hi1), k.bit4));
    }
    const __m512i sc0 = _mm512_permutexvar_epi16(k.idx[0], sm512);
    const __m512i sc1 = _mm512_permutexvar_epi16(k.idx[1], sm512);
    const __m512i sc2 = _mm512_permutexvar_epi16(k.idx[2], sm512);
    const __m512i sc3 = _mm512_permutexvar_epi16(k.idx[3], sm512);
    for (int t = 0; t < T; ++t) {
      const float yd = p[t]->d[i];
      const float d = xd * yd;
      const float dmin = xdmin * yd;
      const __m128i gsum = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p[t]->gsum + 8 * i));
      acc_min[t] =
          _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(_mm_madd_epi16(mins, gsum)), acc_min[t]);
      const int8_t* q = p[t]->qs + 256 * i;
      const __m512i s0 = _mm512_madd_epi16(_mm512_maddubs_epi16(lo0, _mm512_load_si512(q)), sc0);
      const __m512i s1 =
          _mm512_madd_epi16(_mm512_maddubs_epi16(hi0, _mm512_load_si512(q + 64)), sc1);
      const __m512i s2 =
          _mm512_madd_epi16(_mm512_maddubs_epi16(lo1, _mm512_load_si512(q + 128)), sc2);
      const __m512i s3 =
          _mm512_madd_epi16(_mm512_maddubs_epi16(hi1, _mm512_load_si512(q + 192)), sc3);
      const __m512i isum = _mm512_add_epi32(_mm512_add_epi32(s0, s1), _mm512_add_epi32(s2, s3));
      acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(isum), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) out[t] = HorizontalSum(acc[t]) - HorizontalSum(acc_min[t]);
}

template <typename Block>
inline float RowQ45_K(const Block* x, const Q8KPacked& p, int64_t nb, const Q4KConsts& k) {
  const Q8KPacked* one[1] = {&p};
  float out;
  RowsQ45_K<Block, 1>(x, one, nb, k, &out);
  return out;
}

template <typename Block>
void MatVecQ45_KAvx512(const void* w, size_t row_stride_bytes, int64_t rows, const void* act,
                       int64_t n, float* out) {
  const int64_t nb = n / kQK_K;
  const auto* y = static_cast<const BlockQ8_K*>(act);
  const auto* base = static_cast<const uint8_t*>(w);
  const Q4KConsts k;
  Q8KPacked p;
  for (int64_t b0 = 0; b0 < nb || b0 == 0; b0 += kSegmentBlocks) {
    const int64_t seg = nb - b0 < kSegmentBlocks ? nb - b0 : kSegmentBlocks;
    RepackQ8_K(y + b0, seg, &p);
    for (int64_t r = 0; r < rows; ++r) {
      const auto* x =
          reinterpret_cast<const Block*>(base + static_cast<size_t>(r) * row_stride_bytes) + b0;
      const float part = RowQ45_K(x, p, seg, k);
      out[r] = b0 == 0 ? part : out[r] + part;
    }
  }
}

template <typename Block, int T>
void MatVecMultiQ45_KAvx512T(const void* w, size_t row_stride_bytes, int64_t rows,
                             const void* const* acts, int64_t n, float* const* outs) {
  const int64_t nb = n / kQK_K;
  const auto* base = static_cast<const uint8_t*>(w);
  const Q4KConsts k;
  // 17 KiB per activation row: kept per thread, off the stack.
  thread_local Q8KPacked packs[kMaxMultiActs];
  const Q8KPacked* p[T];
  for (int t = 0; t < T; ++t) p[t] = &packs[t];
  for (int64_t b0 = 0; b0 < nb || b0 == 0; b0 += kSegmentBlocks) {
    const int64_t seg = nb - b0 < kSegmentBlocks ? nb - b0 : kSegmentBlocks;
    for (int t = 0; t < T; ++t)
      RepackQ8_K(static_cast<const BlockQ8_K*>(acts[t]) + b0, seg, &packs[t]);
    for (int64_t r = 0; r < rows; ++r) {
      const auto* x =
          reinterpret_cast<const Block*>(base + static_cast<size_t>(r) * row_stride_bytes) + b0;
      float part[T];
      RowsQ45_K<Block, T>(x, p, seg, k, part);
      for (int t = 0; t < T; ++t) outs[t][r] = b0 == 0 ? part[t] : outs[t][r] + part[t];
    }
  }
}

template <typename Block>
void MatVecMultiQ45_KAvx512(const void* w, size_t row_stride_bytes, int64_t rows,
                            const void* const* acts, int count, int64_t n, float* const* outs) {
  switch (count) {
    case 1: MatVecQ45_KAvx512<Block>(w, row_stride_bytes, rows, acts[0], n, outs[0]); return;
    case 2: MatVecMultiQ45_KAvx512T<Block, 2>(w, row_stride_bytes, rows, acts, n, outs); return;
    case 3: MatVecMultiQ45_KAvx512T<Block, 3>(w, row_stride_bytes, rows, acts, n, outs); return;
    default: MatVecMultiQ45_KAvx512T<Block, 4>(w, row_stride_bytes, rows, acts, n, outs); return;
  }
}

template <typename Block>
float DotQ45_KAvx512(const void* w, const void* act, int64_t n) {
  float out = 0;
  MatVecQ45_KAvx512<Block>(w, 0, 1, act, n, &out);
  return out;
}

// Q6_K (blocks.h): within each half h of a block, ql[64h..64h+63] loaded as one vector holds
// the low nibbles of elements 128h+0..63 (in order) and the high nibbles of 128h+64..127; the
// top two bits come from qh[32h..32h+31], shifted per 256-bit half. So each vector lines up with
// 64 consecutive activations and needs no reordering. Quants are biased by +32: the bias term
// 32 * sum(scale * bsum) is accumulated apart.
struct Q6KConsts {
  __m512i low4 = _mm512_set1_epi8(0x0f);
  __m512i bits45 = _mm512_set1_epi8(0x30);
  // Shifts of the qh vector (in 16-bit lanes) for the low / high halves of A and B.
  __m512i shl_a =
      _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(4)), _mm256_set1_epi16(2), 1);
  __m512i shr_b =
      _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(0)), _mm256_set1_epi16(2), 1);
  // vpermw indices: int16 pair-lane i of 64 elements starting at group g covers group g + i / 8.
  __m512i idx[4];
  Q6KConsts() {
    alignas(64) int16_t lanes[32];
    for (int v = 0; v < 4; ++v) {
      for (int i = 0; i < 32; ++i) lanes[i] = static_cast<int16_t>(4 * v + i / 8);
      idx[v] = _mm512_load_si512(lanes);
    }
  }
};

// One Q6_K row against T activation rows: each block's 6-bit quants and scale vectors are
// decoded once; each activation row's sums run in the same order whatever T is (the same bits).
template <int T>
inline void RowsQ6_K(const BlockQ6_K* x, const BlockQ8_K* const* y, int64_t nb, float* out) {
  static const Q6KConsts k;
  __m512 acc[T];
  __m256 acc_bias[T];
  for (int t = 0; t < T; ++t) {
    acc[t] = _mm512_setzero_ps();
    acc_bias[t] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < nb; ++i) {
    const float xd = _cvtsh_ss(x[i].d);
    const __m256i sc16 =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales)));
    const __m512i sc512 = _mm512_castsi256_si512(sc16);
    __m512i qa[2], qb[2], sa[2], sb[2];
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(x[i].ql + 64 * h);
      const __m512i qh = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qh + 32 * h)));
      qa[h] = _mm512_or_si512(_mm512_and_si512(ql, k.low4),
                              _mm512_and_si512(_mm512_sllv_epi16(qh, k.shl_a), k.bits45));
      qb[h] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), k.low4),
                              _mm512_and_si512(_mm512_srlv_epi16(qh, k.shr_b), k.bits45));
      sa[h] = _mm512_permutexvar_epi16(k.idx[2 * h], sc512);
      sb[h] = _mm512_permutexvar_epi16(k.idx[2 * h + 1], sc512);
    }
    for (int t = 0; t < T; ++t) {
      const BlockQ8_K& yb = y[t][i];
      const float d = xd * yb.d;
      // 32 * sum_g scale[g] * bsum[g], as 8 int32 partial sums.
      const __m256i bias =
          _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb.bsums)), sc16);
      acc_bias[t] =
          _mm256_fmadd_ps(_mm256_set1_ps(32.0f * d), _mm256_cvtepi32_ps(bias), acc_bias[t]);
      __m512i isum = _mm512_setzero_si512();
      for (int h = 0; h < 2; ++h) {
        const __m512i ya = _mm512_loadu_si512(yb.qs + 128 * h);
        const __m512i yv = _mm512_loadu_si512(yb.qs + 128 * h + 64);
        // maddubs: q in 0..63 times activations in -127..127, pairs <= 2 * 63 * 127.
        isum = _mm512_add_epi32(isum, _mm512_madd_epi16(_mm512_maddubs_epi16(qa[h], ya), sa[h]));
        isum = _mm512_add_epi32(isum, _mm512_madd_epi16(_mm512_maddubs_epi16(qb[h], yv), sb[h]));
      }
      acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(isum), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) out[t] = HorizontalSum(acc[t]) - HorizontalSum(acc_bias[t]);
}

float DotQ6_KAvx512(const void* w, const void* a, int64_t n) {
  const BlockQ8_K* y[1] = {static_cast<const BlockQ8_K*>(a)};
  float out;
  RowsQ6_K<1>(static_cast<const BlockQ6_K*>(w), y, n / kQK_K, &out);
  return out;
}

template <int T>
void MatVecMultiQ6_KT(const void* w, size_t row_stride_bytes, int64_t rows, const void* const* acts,
                      int64_t n, float* const* outs) {
  const BlockQ8_K* y[T];
  for (int t = 0; t < T; ++t) y[t] = static_cast<const BlockQ8_K*>(acts[t]);
  const auto* base = static_cast<const uint8_t*>(w);
  for (int64_t r = 0; r < rows; ++r) {
    float part[T];
    RowsQ6_K<T>(
        reinterpret_cast<const BlockQ6_K*>(base + static_cast<size_t>(r) * row_stride_bytes), y,
        n / kQK_K, part);
    for (int t = 0; t < T; ++t) outs[t][r] = part[t];
  }
}

void MatVecMultiQ6_KAvx512(const void* w, size_t row_stride_bytes, int64_t rows,
                           const void* const* acts, int count, int64_t n, float* const* outs) {
  switch (count) {
    case 1: MatVecMultiQ6_KT<1>(w, row_stride_bytes, rows, acts, n, outs); return;
    case 2: MatVecMultiQ6_KT<2>(w, row_stride_bytes, rows, acts, n, outs); return;
    case 3: MatVecMultiQ6_KT<3>(w, row_stride_bytes, rows, acts, n, outs); return;
    default: MatVecMultiQ6_KT<4>(w, row_stride_bytes, rows, acts, n, outs); return;
  }
}

}  // namespace

bool FillAvx512VecDot(KernelTable* table) {
  table->vec_dot[kIdQ4_K] = DotQ45_KAvx512<BlockQ4_K>;
  table->mat_vec[kIdQ4_K] = MatVecQ45_KAvx512<BlockQ4_K>;
  table->vec_dot[kIdQ5_K] = DotQ45_KAvx512<BlockQ5_K>;
  table->mat_vec[kIdQ5_K] = MatVecQ45_KAvx512<BlockQ5_K>;
  table->mat_vec_multi[kIdQ4_K] = MatVecMultiQ45_KAvx512<BlockQ4_K>;
  table->mat_vec_multi[kIdQ5_K] = MatVecMultiQ45_KAvx512<BlockQ5_K>;
  table->vec_dot[kIdQ6_K] = DotQ6_KAvx512;
  table->mat_vec_multi[kIdQ6_K] = MatVecMultiQ6_KAvx512;
  return true;
}

}  // namespace colibri::quant::internal

#else  // not x86

namespace colibri::quant::internal {
bool FillAvx512VecDot(KernelTable*) { return false; }
}  // namespace colibri::quant::internal

#endif
