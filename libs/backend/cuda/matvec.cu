// Decode matrix-vector kernels: dispatch by weight type, and the float-type, Q8_0 and Q8_K
// instantiations (the k-quants are in matvec_kquants.cu so the two compile in parallel).
#include "matvec.cuh"

namespace colibri::backend::cuda {
namespace {

// Float weights (F32, F16, BF16) with activations in the same type: lanes take consecutive
// elements (coalesced); any column count.
template <DType kType>
__device__ __forceinline__ float LoadFloat(const void* p, int64_t i) {
  if constexpr (kType == DType::kF32) {
    return static_cast<const float*>(p)[i];
  } else if constexpr (kType == DType::kF16) {
    return HalfBits(static_cast<const uint16_t*>(p)[i]);
  } else {
    return Bf16Bits(static_cast<const uint16_t*>(p)[i]);
  }
}

template <DType kType>
__global__ void __launch_bounds__(kMatVecWarps* kWarp)
    MatVecFloat(const void* __restrict__ w, int64_t rows, int64_t cols,
                const void* __restrict__ act, int n, float* __restrict__ y, bool accumulate) {
  const MatVecTile tile = ThisMatVecTile(n);
  if (tile.row >= rows) return;
  float acc[kMatVecTokens] = {};
  for (int64_t i = tile.lane; i < cols; i += kWarp) {
    const float wv = LoadFloat<kType>(w, tile.row * cols + i);
#pragma unroll
    for (int t = 0; t < kMatVecTokens; ++t) {
      if (t < tile.nt)
        acc[t] += wv * LoadFloat<kType>(act, static_cast<int64_t>(tile.t0 + t) * cols + i);
    }
  }
  WriteRow(acc, tile, rows, y, accumulate);
}

template <DType kType>
cudaError_t LaunchFloat(const MatVecCall& call) {
  MatVecFloat<kType><<<MatVecGrid(call), kMatVecWarps * kWarp, 0, call.stream>>>(
      call.w, call.rows, call.cols, call.act, static_cast<int>(call.n), call.y, call.accumulate);
  return cudaGetLastError();
}

}  // namespace

cudaError_t MatVec(DType w_type, const void* w, int64_t rows, int64_t cols, const void* act,
                   int64_t n, float* y, bool accumulate, const DeviceCodebooks& books,
                   cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return cudaSuccess;
  const MatVecCall call{w, rows, cols, act, n, y, accumulate, books, stream};
  switch (w_type) {
    case DType::kF32: return LaunchFloat<DType::kF32>(call);
    case DType::kF16: return LaunchFloat<DType::kF16>(call);
    case DType::kBF16: return LaunchFloat<DType::kBF16>(call);
    case DType::kQ8_0:
      return LaunchMatVecBlocks<DType::kQ8_0, BlockQ8_0, BlockQ8_0, 1>(call, quant::kQK8_0);
    case DType::kQ8_K:
      return LaunchMatVecBlocks<DType::kQ8_K, BlockQ8_K, BlockQ8_K, quant::kQK_K / 32>(
          call, quant::kQK_K);
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K: return MatVecKQuant(w_type, call);
    default: return MatVecIQuant(w_type, call);
  }
}

}  // namespace colibri::backend::cuda
