// The attention's score kernel: the dot products of a few query heads (the heads of a GQA group
// that share one KV head) with a block of key rows. Stateless and thread-safe; inputs and
// outputs are host memory the caller owns.
#pragma once

#include <cstdint>

namespace colibri::backend::internal {

// scores[h * scores_stride + j] = sum over d < dim of q[h * dim + d] * keys[j * key_stride + d]
// for h < n_q, j < n_keys (strides in floats). Float sums; the order of the additions depends on
// the kernel set, so results differ from a sequential sum in the last bits.
using ScoreKeysFn = void (*)(const float* q, int64_t n_q, const float* keys, int64_t key_stride,
                             int64_t n_keys, int64_t dim, float* scores, int64_t scores_stride);

// The kernel for quant::ActiveIsa() ("avx512", "avx2" or "scalar"): it follows the same cap
// (quant::SetKernelIsaCap, COLIBRI_KERNEL_ISA) as the quant kernels. Cheap; call once per op.
ScoreKeysFn ScoreKeysKernel();

}  // namespace colibri::backend::internal
