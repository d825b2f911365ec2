// The matrix-vector kernels of the decode path (kernels.h MatVec), shared by matvec.cu (float
// types, Q8_0, Q8_K) and matvec_kquants.cu (Q2_K..Q6_K), which instantiate them per type.
//
// One warp per weight row, kMatVecTokens tokens per block row of the grid, so a weight row is
// read from memory once per token tile (decode is bound by the weight bytes). Quantized rows
// are cut into 32-element parts; consecutive lanes take consecutive parts, so a warp reads
// consecutive blocks (coalesced) and each lane accumulates whole parts with integer sums.
#pragma once

#include "common.cuh"
#include "kernels.h"

namespace colibri::backend::cuda {

inline constexpr int kMatVecWarps = 4;  // rows per thread block

// Sums of one row, reduced over the warp and written by lane 0.
__device__ __forceinline__ void WriteRow(float (&acc)[kMatVecTokens], int nt, int64_t row, int64_t rows, int t0,
                                         float* y, bool accumulate) {
#pragma unroll
  for (int t = 0; t < kMatVecTokens; ++t) {
    const float v = WarpSum(acc[t]);
    if (threadIdx.x % kWarp == 0 && t < nt) {
      float& out = y[static_cast<int64_t>(t0 + t) * rows + row];
      out = accumulate ? out + v : v;
    }
  }
}

// Block-quantized weights with a 32-element part per lane step. kParts parts per block;
// ActBlock is the activation block type (BlockQ8_K or BlockQ8_0).
template <DType kType, typename WBlock, typename ActBlock, int kParts>
__global__ void __launch_bounds__(kMatVecWarps * kWarp)
    MatVecBlocks(const uint8_t* __restrict__ w, int64_t rows, int64_t nblocks, const uint8_t* __restrict__ act, int n,
                 float* __restrict__ y, bool accumulate) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kMatVecWarps + threadIdx.x / kWarp;
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarp;
  const int t0 = static_cast<int>(blockIdx.y) * kMatVecTokens;
  const int nt = min(kMatVecTokens, n - t0);
  const auto* wr = reinterpret_cast<const WBlock*>(w) + row * nblocks;
  const auto* a0 = reinterpret_cast<const ActBlock*>(act) + static_cast<int64_t>(t0) * nblocks;
  float acc[kMatVecTokens] = {};
  const int64_t items = nblocks * kParts;
  for (int64_t it = lane; it < items; it += kWarp) {
    const int64_t b = it / kParts;
    const int p = static_cast<int>(it % kParts);
    const auto* wb = reinterpret_cast<const uint8_t*>(wr + b);
#pragma unroll
    for (int t = 0; t < kMatVecTokens; ++t) {
      if (t < nt) {
        const ActBlock& ab = a0[static_cast<int64_t>(t) * nblocks + b];
        if constexpr (kType == DType::kQ8_0) {
          acc[t] += BlockDotQ8_0(*reinterpret_cast<const BlockQ8_0*>(wb), ab);
        } else {
          acc[t] += PartDotK<kType>(wb, ab, p);
        }
      }
    }
  }
  WriteRow(acc, nt, row, rows, t0, y, accumulate);
}

template <DType kType, typename WBlock, typename ActBlock, int kParts>
cudaError_t LaunchMatVecBlocks(const void* w, int64_t rows, int64_t cols, int64_t block_elems, const void* act,
                               int64_t n, float* y, bool accumulate, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((rows + kMatVecWarps - 1) / kMatVecWarps),
                  static_cast<unsigned>((n + kMatVecTokens - 1) / kMatVecTokens));
  MatVecBlocks<kType, WBlock, ActBlock, kParts><<<grid, kMatVecWarps * kWarp, 0, stream>>>(
      static_cast<const uint8_t*>(w), rows, cols / block_elems, static_cast<const uint8_t*>(act),
      static_cast<int>(n), y, accumulate);
  return cudaGetLastError();
}

// The k-quant instantiations (matvec_kquants.cu).
cudaError_t MatVecKQuant(DType w_type, const void* w, int64_t rows, int64_t cols, const void* act, int64_t n,
                         float* y, bool accumulate, cudaStream_t stream);

}  // namespace colibri::backend::cuda
