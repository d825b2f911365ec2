// Decode matrix-vector kernels for the k-quant weight types (Q2_K..Q6_K) with Q8_K activations.
#include "matvec.cuh"

namespace colibri::backend::cuda {

namespace {

// Q2_K..Q6_K weights with Q8_K activations: 256-element blocks of 8 parts.
template <DType kType, typename WBlock>
cudaError_t LaunchKQuant(const MatVecCall& call) {
  return LaunchMatVecBlocks<kType, WBlock, BlockQ8_K, quant::kQK_K / 32>(call, quant::kQK_K);
}

}  // namespace

cudaError_t MatVecKQuant(DType w_type, const MatVecCall& call) {
  switch (w_type) {
    case DType::kQ2_K: return LaunchKQuant<DType::kQ2_K, BlockQ2_K>(call);
    case DType::kQ3_K: return LaunchKQuant<DType::kQ3_K, BlockQ3_K>(call);
    case DType::kQ4_K: return LaunchKQuant<DType::kQ4_K, BlockQ4_K>(call);
    case DType::kQ5_K: return LaunchKQuant<DType::kQ5_K, BlockQ5_K>(call);
    case DType::kQ6_K: return LaunchKQuant<DType::kQ6_K, BlockQ6_K>(call);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace colibri::backend::cuda
