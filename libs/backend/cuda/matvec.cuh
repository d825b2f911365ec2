// The matrix-vector kernels of the decode path (kernels.h MatVec), shared by matvec.cu (float
// types, Q8_0, Q8_K), matvec_kquants.cu (Q2_K..Q6_K) and matvec_iquants.cu (the legacy formats,
// the i-quants and MXFP4), which instantiate them per type.
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

// The arguments of one MatVec call (kernels.h), passed on to the launchers.
struct MatVecCall {
  const void* w;
  int64_t rows;
  int64_t cols;
  const void* act;
  int64_t n;
  float* y;
  bool accumulate;
  DeviceCodebooks books;
  cudaStream_t stream;
};

// The grid of a call: kMatVecWarps weight rows per thread block along x, token tiles along y.
inline dim3 MatVecGrid(const MatVecCall& call) {
  return dim3(static_cast<unsigned>((call.rows + kMatVecWarps - 1) / kMatVecWarps),
              static_cast<unsigned>((call.n + kMatVecTokens - 1) / kMatVecTokens));
}

// What the calling warp computes: weight row `row` for tokens t0 .. t0 + nt - 1; `lane` is the
// thread's lane in the warp. Rows past the matrix (row >= rows) have nothing to do.
struct MatVecTile {
  int64_t row;
  int lane;
  int t0;
  int nt;
};
__device__ __forceinline__ MatVecTile ThisMatVecTile(int n) {
  MatVecTile tile;
  tile.row = static_cast<int64_t>(blockIdx.x) * kMatVecWarps + threadIdx.x / kWarp;
  tile.lane = threadIdx.x % kWarp;
  tile.t0 = static_cast<int>(blockIdx.y) * kMatVecTokens;
  tile.nt = min(kMatVecTokens, n - tile.t0);
  return tile;
}

// Sums of the tile's row, reduced over the warp and written by lane 0.
__device__ __forceinline__ void WriteRow(float (&acc)[kMatVecTokens], const MatVecTile& tile,
                                         int64_t rows, float* y, bool accumulate) {
#pragma unroll
  for (int t = 0; t < kMatVecTokens; ++t) {
    const float v = WarpSum(acc[t]);
    if (tile.lane == 0 && t < tile.nt) {
      float& out = y[static_cast<int64_t>(tile.t0 + t) * rows + tile.row];
      out = accumulate ? out + v : v;
    }
  }
}

// Part p of a legacy / codebook / MXFP4 weight block dotted with its activation block (defined
// and instantiated in matvec_iquants.cu only).
template <DType kType, typename ActBlock>
__device__ float PartDotI(const uint8_t* wb, const ActBlock& y, int p,
                          const DeviceCodebooks& books);

// Whether kType's part dot product is PartDotI (otherwise BlockDotQ8_0 or PartDotK).
__host__ __device__ constexpr bool UsesPartDotI(DType t) {
  return t == DType::kQ4_0 || t == DType::kQ4_1 || t == DType::kQ5_0 || t == DType::kQ5_1 ||
         t == DType::kIQ4_NL || t == DType::kIQ4_XS || t == DType::kMXFP4 || t == DType::kIQ1_S ||
         t == DType::kIQ1_M || t == DType::kIQ2_XXS || t == DType::kIQ2_XS || t == DType::kIQ2_S ||
         t == DType::kIQ3_XXS || t == DType::kIQ3_S;
}

// Block-quantized weights with a 32-element part per lane step. kParts parts per block;
// ActBlock is the activation block type (BlockQ8_K, BlockQ8_0 or BlockQ8_1).
template <DType kType, typename WBlock, typename ActBlock, int kParts>
__global__ void __launch_bounds__(kMatVecWarps* kWarp)
    MatVecBlocks(const uint8_t* __restrict__ w, int64_t rows, int64_t nblocks,
                 const uint8_t* __restrict__ act, int n, float* __restrict__ y, bool accumulate,
                 const DeviceCodebooks books) {
  const MatVecTile tile = ThisMatVecTile(n);
  if (tile.row >= rows) return;
  const auto* wr = reinterpret_cast<const WBlock*>(w) + tile.row * nblocks;
  const auto* a0 = reinterpret_cast<const ActBlock*>(act) + static_cast<int64_t>(tile.t0) * nblocks;
  float acc[kMatVecTokens] = {};
  const int64_t items = nblocks * kParts;
  for (int64_t it = tile.lane; it < items; it += kWarp) {
    const int64_t b = it / kParts;
    const int p = static_cast<int>(it % kParts);
    const auto* wb = reinterpret_cast<const uint8_t*>(wr + b);
#pragma unroll
    for (int t = 0; t < kMatVecTokens; ++t) {
      if (t < tile.nt) {
        const ActBlock& ab = a0[static_cast<int64_t>(t) * nblocks + b];
        if constexpr (kType == DType::kQ8_0) {
          acc[t] += BlockDotQ8_0(*reinterpret_cast<const BlockQ8_0*>(wb), ab);
        } else if constexpr (UsesPartDotI(kType)) {
          acc[t] += PartDotI<kType, ActBlock>(wb, ab, p, books);
        } else {
          acc[t] += PartDotK<kType>(wb, ab, p);
        }
      }
    }
  }
  WriteRow(acc, tile, rows, y, accumulate);
}

// Launches MatVecBlocks for weights of `block_elems` elements per block.
template <DType kType, typename WBlock, typename ActBlock, int kParts>
cudaError_t LaunchMatVecBlocks(const MatVecCall& call, int64_t block_elems) {
  MatVecBlocks<kType, WBlock, ActBlock, kParts>
      <<<MatVecGrid(call), kMatVecWarps * kWarp, 0, call.stream>>>(
          static_cast<const uint8_t*>(call.w), call.rows, call.cols / block_elems,
          static_cast<const uint8_t*>(call.act), static_cast<int>(call.n), call.y, call.accumulate,
          call.books);
  return cudaGetLastError();
}

// The k-quant instantiations (matvec_kquants.cu) and the others (matvec_iquants.cu); both return
// cudaErrorInvalidValue for a type they do not have.
cudaError_t MatVecKQuant(DType w_type, const MatVecCall& call);
cudaError_t MatVecIQuant(DType w_type, const MatVecCall& call);

}  // namespace colibri::backend::cuda
