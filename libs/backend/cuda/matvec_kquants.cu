// Decode matrix-vector kernels for the k-quant weight types (Q2_K..Q6_K) with Q8_K activations.
#include "matvec.cuh"

namespace colibri::backend::cuda {

cudaError_t MatVecKQuant(DType w_type, const void* w, int64_t rows, int64_t cols, const void* act, int64_t n,
                         float* y, bool accumulate, cudaStream_t stream) {
  constexpr int kParts = quant::kQK_K / 32;
  switch (w_type) {
    case DType::kQ2_K:
      return LaunchMatVecBlocks<DType::kQ2_K, BlockQ2_K, BlockQ8_K, kParts>(w, rows, cols, quant::kQK_K, act, n, y,
                                                                             accumulate, stream);
    case DType::kQ3_K:
      return LaunchMatVecBlocks<DType::kQ3_K, BlockQ3_K, BlockQ8_K, kParts>(w, rows, cols, quant::kQK_K, act, n, y,
                                                                             accumulate, stream);
    case DType::kQ4_K:
      return LaunchMatVecBlocks<DType::kQ4_K, BlockQ4_K, BlockQ8_K, kParts>(w, rows, cols, quant::kQK_K, act, n, y,
                                                                             accumulate, stream);
    case DType::kQ5_K:
      return LaunchMatVecBlocks<DType::kQ5_K, BlockQ5_K, BlockQ8_K, kParts>(w, rows, cols, quant::kQK_K, act, n, y,
                                                                             accumulate, stream);
    case DType::kQ6_K:
      return LaunchMatVecBlocks<DType::kQ6_K, BlockQ6_K, BlockQ8_K, kParts>(w, rows, cols, quant::kQK_K, act, n, y,
                                                                             accumulate, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace colibri::backend::cuda
