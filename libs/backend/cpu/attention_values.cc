// Value kernels. The plain loop held a 64-float slice of one head's accumulator in a local array
// that GCC keeps on the stack: every row cost a load, an FMA and a store per vector, chained
// through store-to-load forwarding (~6% of decode samples on the Qwen3-like shape at 500-2000
// tokens of context). The AVX-512 kernel keeps the accumulators of up to 4 heads x 64 floats in
// 16 registers and loads each value row once for all of them.
#include "attention_values.h"

#include <algorithm>
#include <string_view>

#include "colibri/quant/vec_dot.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace colibri::backend::internal {
namespace {

// One head: acc += sum_j p[j] * rows[j], a 64-float slice of acc at a time across the rows.
// GCC builds one copy per target and picks the best for the CPU at load time (ifunc).
__attribute__((target_clones("avx512f", "avx2", "default"))) void AccumulateHead(
    const float* __restrict p, const float* __restrict rows, int64_t stride, int64_t n_rows,
    float* __restrict acc, int64_t dim) {
  constexpr int64_t kSlice = 64;
  int64_t d0 = 0;
  for (; d0 + kSlice <= dim; d0 += kSlice) {
    float s[kSlice];
    for (int64_t i = 0; i < kSlice; ++i) s[i] = acc[d0 + i];
    for (int64_t j = 0; j < n_rows; ++j) {
      const float* r = rows + j * stride + d0;
      const float pj = p[j];
      for (int64_t i = 0; i < kSlice; ++i) s[i] += pj * r[i];
    }
    for (int64_t i = 0; i < kSlice; ++i) acc[d0 + i] = s[i];
  }
  for (; d0 < dim; ++d0) {
    float s = acc[d0];
    for (int64_t j = 0; j < n_rows; ++j) s += p[j] * rows[j * stride + d0];
    acc[d0] = s;
  }
}

void AccumulateRowsPlain(const float* p, int64_t p_stride, int64_t n_heads, const float* rows,
                         int64_t row_stride, int64_t n_rows, float* acc, int64_t acc_stride,
                         int64_t dim) {
  for (int64_t h = 0; h < n_heads; ++h)
    AccumulateHead(p + h * p_stride, rows, row_stride, n_rows, acc + h * acc_stride, dim);
}

#if defined(__x86_64__) || defined(__i386__)

// kHeads heads x kVectors vectors of 16 floats at d0 (the last vector masked to `tail` lanes).
template <int kHeads, int kVectors>
__attribute__((target("avx512f"))) inline void AccumulateTile(const float* p, int64_t p_stride,
                                                              const float* rows, int64_t row_stride,
                                                              int64_t n_rows, float* acc,
                                                              int64_t acc_stride, int64_t d0,
                                                              __mmask16 tail) {
  __mmask16 mask[kVectors];
#pragma GCC unroll 4
  for (int v = 0; v < kVectors; ++v) mask[v] = v + 1 < kVectors ? __mmask16(0xffff) : tail;
  __m512 a[kHeads][kVectors];
#pragma GCC unroll 4
  for (int h = 0; h < kHeads; ++h) {
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v)
      a[h][v] = _mm512_maskz_loadu_ps(mask[v], acc + h * acc_stride + d0 + 16 * v);
  }
  for (int64_t j = 0; j < n_rows; ++j) {
    const float* r = rows + j * row_stride + d0;
    __m512 x[kVectors];
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) x[v] = _mm512_maskz_loadu_ps(mask[v], r + 16 * v);
#pragma GCC unroll 4
    for (int h = 0; h < kHeads; ++h) {
      const __m512 w = _mm512_set1_ps(p[h * p_stride + j]);
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) a[h][v] = _mm512_fmadd_ps(w, x[v], a[h][v]);
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < kHeads; ++h) {
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v)
      _mm512_mask_storeu_ps(acc + h * acc_stride + d0 + 16 * v, mask[v], a[h][v]);
  }
}

template <int kHeads>
__attribute__((target("avx512f"))) void AccumulateHeads(const float* p, int64_t p_stride,
                                                        const float* rows, int64_t row_stride,
                                                        int64_t n_rows, float* acc,
                                                        int64_t acc_stride, int64_t dim) {
  for (int64_t d0 = 0; d0 < dim; d0 += 64) {
    const int64_t left = std::min<int64_t>(64, dim - d0);
    const int vectors = static_cast<int>((left + 15) / 16);
    const int last = static_cast<int>(left - 16 * (vectors - 1));
    const auto tail = static_cast<__mmask16>(last == 16 ? 0xffff : (1u << last) - 1);
    switch (vectors) {
      case 4:
        AccumulateTile<kHeads, 4>(p, p_stride, rows, row_stride, n_rows, acc, acc_stride, d0, tail);
        break;
      case 3:
        AccumulateTile<kHeads, 3>(p, p_stride, rows, row_stride, n_rows, acc, acc_stride, d0, tail);
        break;
      case 2:
        AccumulateTile<kHeads, 2>(p, p_stride, rows, row_stride, n_rows, acc, acc_stride, d0, tail);
        break;
      default:
        AccumulateTile<kHeads, 1>(p, p_stride, rows, row_stride, n_rows, acc, acc_stride, d0, tail);
    }
  }
}

__attribute__((target("avx512f"))) void AccumulateRowsAvx512(const float* p, int64_t p_stride,
                                                             int64_t n_heads, const float* rows,
                                                             int64_t row_stride, int64_t n_rows,
                                                             float* acc, int64_t acc_stride,
                                                             int64_t dim) {
  int64_t h = 0;
  for (; h + 4 <= n_heads; h += 4)
    AccumulateHeads<4>(p + h * p_stride, p_stride, rows, row_stride, n_rows, acc + h * acc_stride,
                       acc_stride, dim);
  const float* ph = p + h * p_stride;
  float* acch = acc + h * acc_stride;
  switch (n_heads - h) {
    case 3:
      AccumulateHeads<3>(ph, p_stride, rows, row_stride, n_rows, acch, acc_stride, dim);
      break;
    case 2:
      AccumulateHeads<2>(ph, p_stride, rows, row_stride, n_rows, acch, acc_stride, dim);
      break;
    case 1:
      AccumulateHeads<1>(ph, p_stride, rows, row_stride, n_rows, acch, acc_stride, dim);
      break;
    default: break;
  }
}

#endif

}  // namespace

AccumulateRowsFn AccumulateRowsKernel() {
#if defined(__x86_64__) || defined(__i386__)
  if (quant::ActiveIsa() == "avx512") return AccumulateRowsAvx512;
#endif
  return AccumulateRowsPlain;
}

}  // namespace colibri::backend::internal
