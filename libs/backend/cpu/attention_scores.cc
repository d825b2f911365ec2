// Score kernels. The SIMD ones hold a tile of (4 heads) x (4 or 2 keys) partial sums in
// registers, so each key row is loaded once per 4 heads and each query slice once per tile, and
// reduce the whole tile with one shuffle tree instead of one horizontal sum per dot product.
// With one dot product per key and head (quant::MatVec over F32 rows, a horizontal sum each),
// the scores were ~9% of decode samples on the Qwen3-like shape at a 512-token context.
#include "attention_scores.h"

#include <algorithm>
#include <string_view>

#include "colibri/quant/vec_dot.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace colibri::backend::internal {
namespace {

void ScoreKeysScalar(const float* q, int64_t n_q, const float* keys, int64_t key_stride,
                     int64_t n_keys, int64_t dim, float* scores, int64_t scores_stride) {
  for (int64_t h = 0; h < n_q; ++h) {
    for (int64_t j = 0; j < n_keys; ++j) {
      const float* k = keys + j * key_stride;
      float s = 0.0f;
      for (int64_t d = 0; d < dim; ++d) s += q[h * dim + d] * k[d];
      scores[h * scores_stride + j] = s;
    }
  }
}

#if defined(__x86_64__) || defined(__i386__)

constexpr int64_t kTileHeads = 4;

// The rows of the tile at heads h0.., keys j0..: past the last head or key the tile repeats the
// last one (its results are not stored), so the inner loops have no branches.
template <int64_t kTileKeys>
struct TileRows {
  TileRows(const float* q, int64_t n_q, int64_t dim, int64_t h0, const float* keys,
           int64_t key_stride, int64_t n_keys, int64_t j0) {
#pragma GCC unroll 16
    for (int64_t h = 0; h < kTileHeads; ++h) head[h] = q + std::min(h0 + h, n_q - 1) * dim;
#pragma GCC unroll 16
    for (int64_t j = 0; j < kTileKeys; ++j)
      key[j] = keys + std::min(j0 + j, n_keys - 1) * key_stride;
  }
  const float* head[kTileHeads];
  const float* key[kTileKeys];
};

// Stores the tile's sums (sums[h * kTileKeys + j] for head h0 + h, key j0 + j) inside the block.
template <int64_t kTileKeys>
inline void StoreTile(const float* sums, int64_t h0, int64_t n_q, int64_t j0, int64_t n_keys,
                      float* scores, int64_t scores_stride) {
  const int64_t nh = std::min(kTileHeads, n_q - h0), nk = std::min(kTileKeys, n_keys - j0);
  for (int64_t h = 0; h < nh; ++h) {
    for (int64_t j = 0; j < nk; ++j)
      scores[(h0 + h) * scores_stride + j0 + j] = sums[h * kTileKeys + j];
  }
}

// _mm512_shuffle_f32x4 with an all-ones zero mask: the unmasked intrinsic trips GCC 12's
// -Wmaybe-uninitialized inside its own header (an undefined pass-through vector).
template <int kImm>
__attribute__((target("avx512f"))) inline __m512 ShuffleQuads(__m512 a, __m512 b) {
  return _mm512_maskz_shuffle_f32x4(0xFFFF, a, b, kImm);
}

// 4 heads x 4 keys, 16 floats of dim per step.
__attribute__((target("avx512f"))) void ScoreKeysAvx512(const float* q, int64_t n_q,
                                                        const float* keys, int64_t key_stride,
                                                        int64_t n_keys, int64_t dim, float* scores,
                                                        int64_t scores_stride) {
  constexpr int64_t kTileKeys = 4;
  // The reduction below leaves v[kBase[quad] + kOffset[lane]] summed in output lane
  // 4 * quad + lane; feeding it acc[4 * h + j] makes lane 4 * h + j the tile's (head h, key j).
  constexpr int kBase[4] = {0, 8, 4, 12}, kOffset[4] = {0, 2, 1, 3};
  const __mmask16 tail_mask = static_cast<__mmask16>((1u << (dim % 16)) - 1);
  for (int64_t h0 = 0; h0 < n_q; h0 += kTileHeads) {
    for (int64_t j0 = 0; j0 < n_keys; j0 += kTileKeys) {
      const TileRows<kTileKeys> rows(q, n_q, dim, h0, keys, key_stride, n_keys, j0);
      __m512 acc[kTileHeads * kTileKeys];
#pragma GCC unroll 16
      for (__m512& a : acc) a = _mm512_setzero_ps();
      // Masked loads throughout: the last step of a dim that is not a multiple of 16 reads only
      // the dim's floats, at no cost to the full steps.
      for (int64_t d = 0; d < dim; d += 16) {
        const __mmask16 mask = d + 16 <= dim ? __mmask16{0xFFFF} : tail_mask;
        __m512 k[kTileKeys];
#pragma GCC unroll 16
        for (int64_t j = 0; j < kTileKeys; ++j) k[j] = _mm512_maskz_loadu_ps(mask, rows.key[j] + d);
#pragma GCC unroll 16
        for (int64_t h = 0; h < kTileHeads; ++h) {
          const __m512 qv = _mm512_maskz_loadu_ps(mask, rows.head[h] + d);
#pragma GCC unroll 16
          for (int64_t j = 0; j < kTileKeys; ++j)
            acc[h * kTileKeys + j] = _mm512_fmadd_ps(qv, k[j], acc[h * kTileKeys + j]);
        }
      }
      __m512 v[16];
#pragma GCC unroll 16
      for (int p = 0; p < 4; ++p) {
#pragma GCC unroll 16
        for (int l = 0; l < 4; ++l) v[kBase[p] + kOffset[l]] = acc[4 * p + l];
      }
      // 16 vectors -> 8: v[i] and v[i + 8] halved into the two 256-bit halves.
      __m512 w[8];
#pragma GCC unroll 16
      for (int i = 0; i < 8; ++i) {
        w[i] =
            _mm512_add_ps(ShuffleQuads<0x44>(v[i], v[i + 8]), ShuffleQuads<0xEE>(v[i], v[i + 8]));
      }
      // 8 -> 4: quads [v[i], v[i + 8], v[i + 4], v[i + 12]] of 4 partial sums each.
      __m512 x[4];
#pragma GCC unroll 16
      for (int i = 0; i < 4; ++i) {
        x[i] =
            _mm512_add_ps(ShuffleQuads<0x88>(w[i], w[i + 4]), ShuffleQuads<0xDD>(w[i], w[i + 4]));
      }
      // 4 -> 2 -> 1 within each 128-bit quad: lanes [x0, x2, x1, x3].
      __m512 y[2];
#pragma GCC unroll 16
      for (int i = 0; i < 2; ++i) {
        y[i] = _mm512_add_ps(_mm512_shuffle_ps(x[i], x[i + 2], 0x44),
                             _mm512_shuffle_ps(x[i], x[i + 2], 0xEE));
      }
      const __m512 z =
          _mm512_add_ps(_mm512_shuffle_ps(y[0], y[1], 0x88), _mm512_shuffle_ps(y[0], y[1], 0xDD));
      alignas(64) float sums[16];
      _mm512_store_ps(sums, z);
      StoreTile<kTileKeys>(sums, h0, n_q, j0, n_keys, scores, scores_stride);
    }
  }
}

// 4 heads x 2 keys, 8 floats of dim per step (16 YMM registers: 8 sums, 2 keys, a query).
__attribute__((target("avx2,fma"))) void ScoreKeysAvx2(const float* q, int64_t n_q,
                                                       const float* keys, int64_t key_stride,
                                                       int64_t n_keys, int64_t dim, float* scores,
                                                       int64_t scores_stride) {
  constexpr int64_t kTileKeys = 2;
  const int64_t tail = dim % 8;
  alignas(32) int32_t mask_bits[8];
  for (int64_t i = 0; i < 8; ++i) mask_bits[i] = i < tail ? -1 : 0;
  const __m256i tail_mask = _mm256_load_si256(reinterpret_cast<const __m256i*>(mask_bits));
  for (int64_t h0 = 0; h0 < n_q; h0 += kTileHeads) {
    for (int64_t j0 = 0; j0 < n_keys; j0 += kTileKeys) {
      const TileRows<kTileKeys> rows(q, n_q, dim, h0, keys, key_stride, n_keys, j0);
      __m256 acc[kTileHeads * kTileKeys];
#pragma GCC unroll 16
      for (__m256& a : acc) a = _mm256_setzero_ps();
      int64_t d = 0;
      for (; d + 8 <= dim; d += 8) {
        __m256 k[kTileKeys];
#pragma GCC unroll 16
        for (int64_t j = 0; j < kTileKeys; ++j) k[j] = _mm256_loadu_ps(rows.key[j] + d);
#pragma GCC unroll 16
        for (int64_t h = 0; h < kTileHeads; ++h) {
          const __m256 qv = _mm256_loadu_ps(rows.head[h] + d);
#pragma GCC unroll 16
          for (int64_t j = 0; j < kTileKeys; ++j)
            acc[h * kTileKeys + j] = _mm256_fmadd_ps(qv, k[j], acc[h * kTileKeys + j]);
        }
      }
      if (tail != 0) {
        __m256 k[kTileKeys];
#pragma GCC unroll 16
        for (int64_t j = 0; j < kTileKeys; ++j)
          k[j] = _mm256_maskload_ps(rows.key[j] + d, tail_mask);
#pragma GCC unroll 16
        for (int64_t h = 0; h < kTileHeads; ++h) {
          const __m256 qv = _mm256_maskload_ps(rows.head[h] + d, tail_mask);
#pragma GCC unroll 16
          for (int64_t j = 0; j < kTileKeys; ++j)
            acc[h * kTileKeys + j] = _mm256_fmadd_ps(qv, k[j], acc[h * kTileKeys + j]);
        }
      }
      // 8 vectors -> one of their 8 sums, in order: two rounds of pairwise adds within each
      // 128-bit lane, then the lanes added.
      const __m256 s01 = _mm256_hadd_ps(acc[0], acc[1]), s23 = _mm256_hadd_ps(acc[2], acc[3]);
      const __m256 s45 = _mm256_hadd_ps(acc[4], acc[5]), s67 = _mm256_hadd_ps(acc[6], acc[7]);
      const __m256 lo = _mm256_hadd_ps(s01, s23), hi = _mm256_hadd_ps(s45, s67);
      const __m256 z =
          _mm256_add_ps(_mm256_permute2f128_ps(lo, hi, 0x20), _mm256_permute2f128_ps(lo, hi, 0x31));
      alignas(32) float sums[8];
      _mm256_store_ps(sums, z);
      StoreTile<kTileKeys>(sums, h0, n_q, j0, n_keys, scores, scores_stride);
    }
  }
}

#endif  // x86

}  // namespace

ScoreKeysFn ScoreKeysKernel() {
#if defined(__x86_64__) || defined(__i386__)
  const std::string_view isa = quant::ActiveIsa();
  if (isa == "avx512") return ScoreKeysAvx512;
  if (isa == "avx2") return ScoreKeysAvx2;
#endif
  return ScoreKeysScalar;
}

}  // namespace colibri::backend::internal
