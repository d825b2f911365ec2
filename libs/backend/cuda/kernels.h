// Launchers of the CUDA kernels (defined in the *.cu files beside this header), callable from
// host C++. Every launcher queues work on `stream` and returns the launch error (cudaSuccess or
// the error cudaGetLastError reports); none synchronises. Pointers are device memory unless a
// comment says otherwise. Types and shapes as in backend.h.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "colibri/quant/dtype.h"

namespace colibri::backend::cuda {

// The codebooks of the i-quants, IQ4_NL / IQ4_XS and MXFP4 in device memory (quant/codebooks.h,
// quant/blocks.h), for the kernels that decode those formats. Made once per device by
// UploadCodebooks; the pointers stay valid until that storage is freed.
struct DeviceCodebooks {
  const uint64_t* iq2xxs;  // [256]
  const uint64_t* iq2xs;   // [512]
  const uint64_t* iq2s;    // [1024]
  const uint32_t* iq3xxs;  // [256]
  const uint32_t* iq3s;    // [512]
  const uint64_t* iq1s;    // [2048]
  const uint8_t* signs;    // [128] ksigns_iq2xs
  const int8_t* iq4nl;     // [16]
  const int8_t* mxfp4;     // [16]
};

// Copies the tables into one new device allocation (*storage, freed by the caller with
// cudaFree) and points *books at them. Synchronous.
cudaError_t UploadCodebooks(void** storage, DeviceCodebooks* books);

// Quantizes n rows of `cols` activations to `act_type` (F16, BF16, Q8_0, Q8_1, Q8_K; what
// quant::QuantizeActivations computes, bit for bit): row t at dst + t * RowBytes(act_type, cols).
cudaError_t QuantizeActivations(quant::DType act_type, const float* x, int64_t n, int64_t cols,
                                void* dst, cudaStream_t stream);

// y[t, r] (+)= VecDot(w row r, act row t) for t < n, r < rows, with `act` from
// QuantizeActivations (or F32 rows for F32 weights). One warp per weight row; tokens in tiles of
// kMatVecTokens so each weight row is read once per tile.
inline constexpr int kMatVecTokens = 8;
cudaError_t MatVec(quant::DType w_type, const void* w, int64_t rows, int64_t cols, const void* act,
                   int64_t n, float* y, bool accumulate, const DeviceCodebooks& books,
                   cudaStream_t stream);

// out[i, :] = dequantized row ids[i] of `table` (ids in device memory).
cudaError_t GetRows(quant::DType type, const void* table, int64_t cols, const int32_t* ids,
                    int64_t n, float* out, const DeviceCodebooks& books, cudaStream_t stream);
// Rows [row0, row0 + n_rows) of w dequantized to `out_type` (F16 or F32) rows of `cols`.
cudaError_t DequantizeRows(quant::DType type, const void* w, int64_t cols, int64_t row0,
                           int64_t n_rows, quant::DType out_type, void* out,
                           const DeviceCodebooks& books, cudaStream_t stream);
// F32 -> F16 or BF16 (round to nearest even), n elements.
cudaError_t ConvertF32(const float* x, int64_t n, quant::DType out_type, void* out,
                       cudaStream_t stream);

cudaError_t AddBias(float* x, const float* bias, int64_t n, int64_t dim, cudaStream_t stream);
cudaError_t RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
                    float* y, cudaStream_t stream);
// `inv_freq` (device memory): n_rot / 2 per-pair inverse frequencies; see backend::RopeParams.
cudaError_t Rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* positions,
                 const double* inv_freq, int64_t n_rot, int64_t offset, bool interleaved,
                 float mscale, cudaStream_t stream);
cudaError_t StoreKv(const float* k, const float* v, const int32_t* positions, int64_t n,
                    int64_t kv_dim, float* k_cache, float* v_cache, cudaStream_t stream);
cudaError_t SiluMul(float* gate, const float* up, int64_t n, cudaStream_t stream);
cudaError_t ClampedSwiGlu(float* gate, const float* up, int64_t n, float alpha, float limit,
                          cudaStream_t stream);
cudaError_t Add(float* x, const float* y, int64_t n, cudaStream_t stream);
cudaError_t GatherRows(const float* src, const int32_t* rows, int64_t n, int64_t dim, float* dst,
                       cudaStream_t stream);
cudaError_t ScatterAddRows(const float* src, const int32_t* rows, const float* scales, int64_t n,
                           int64_t dim, float* dst, cudaStream_t stream);

// Causal attention; head_dim <= kMaxHeadDim. positions in device memory; window, ring and sinks
// as in AttentionArgs (backend.h).
inline constexpr int kMaxHeadDim = 256;
struct AttentionShape {
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 1.0f;
  int64_t window = 0, ring = 0;
  const float* sinks = nullptr;  // [n_heads] or nullptr
};
cudaError_t Attention(const float* q, const float* k_cache, const float* v_cache,
                      const int32_t* positions, int64_t n, const AttentionShape& shape, float* out,
                      cudaStream_t stream);

}  // namespace colibri::backend::cuda
