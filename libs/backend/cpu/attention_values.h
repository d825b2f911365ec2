// The attention's value kernel: the weighted sum of a block of value rows into the accumulators
// of a few query heads (the heads of a GQA group, which share one KV head). Stateless and
// thread-safe; inputs and outputs are host memory the caller owns.
#pragma once

#include <cstdint>

namespace colibri::backend::internal {

// acc[h * acc_stride + d] += p[h * p_stride + j] * rows[j * row_stride + d] for j = 0, 1, ...
// n_rows - 1 in that order, for h < n_heads and d < dim (strides in floats). A head's sums do
// not depend on n_heads. The AVX-512 kernel adds each row with one fused multiply-add, the
// rounding of the plain loop compiled for AVX-512 (GCC contracts it), so both give the same
// floats; the other kernels are the plain loop.
using AccumulateRowsFn = void (*)(const float* p, int64_t p_stride, int64_t n_heads,
                                  const float* rows, int64_t row_stride, int64_t n_rows, float* acc,
                                  int64_t acc_stride, int64_t dim);

// The kernel for quant::ActiveIsa(), as ScoreKeysKernel (attention_scores.h). Cheap; call once
// per op.
AccumulateRowsFn AccumulateRowsKernel();

}  // namespace colibri::backend::internal
