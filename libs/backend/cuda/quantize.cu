// Activation quantization (bit-exact with quant::QuantizeActivations) and dequantization
// (GetRows, and weight rows to F16 / F32 for the prefill GEMM).
#include <cstring>
#include <vector>

#include "colibri/quant/codebooks.h"
#include "common.cuh"
#include "kernels.h"

namespace colibri::backend::cuda {
namespace {

// One warp per Q8_0 block: scale absmax/127, q = round-half-even(x * 127/absmax), as GGML's x86
// SIMD path (and the CPU backend) computes it.
__global__ void QuantizeQ8_0Kernel(const float* __restrict__ x, int64_t nblocks,
                                   BlockQ8_0* __restrict__ out) {
  const int64_t b = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  if (b >= nblocks) return;
  const int lane = threadIdx.x % kWarp;
  const float v = x[b * quant::kQK8_0 + lane];
  const float amax = WarpMax(fabsf(v));
  const float d = amax / 127.f;
  const float id = amax != 0.0f ? 127.f / amax : 0.0f;
  out[b].qs[lane] = static_cast<int8_t>(__float2int_rn(__fmul_rn(v, id)));
  if (lane == 0) out[b].d = ToHalfBits(d);
}

// Q8_1 (for Q4_1 / Q5_1 weights): the Q8_0 quants plus s = f16(d * sum of the quants), d
// unrounded, as quant::QuantizeActivations.
__global__ void QuantizeQ8_1Kernel(const float* __restrict__ x, int64_t nblocks,
                                   BlockQ8_1* __restrict__ out) {
  const int64_t b = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  if (b >= nblocks) return;
  const int lane = threadIdx.x % kWarp;
  const float v = x[b * 32 + lane];
  const float amax = WarpMax(fabsf(v));
  const float d = amax / 127.f;
  const float id = amax != 0.0f ? 127.f / amax : 0.0f;
  const int q = __float2int_rn(__fmul_rn(v, id));
  out[b].qs[lane] = static_cast<int8_t>(q);
  int sum = q;
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) {
    out[b].d = ToHalfBits(d);
    out[b].s = ToHalfBits(__fmul_rn(d, static_cast<float>(sum)));
  }
}

// One 256-thread block per Q8_K block: the element of largest magnitude (the first one on ties)
// sets iscale = -127 / max; q = min(127, round-half-even(iscale * x)); bsums per 16.
__global__ void QuantizeQ8_KKernel(const float* __restrict__ x, BlockQ8_K* __restrict__ out) {
  __shared__ float s_abs[quant::kQK_K / kWarp];
  __shared__ int s_idx[quant::kQK_K / kWarp];
  __shared__ int s_q[quant::kQK_K];
  const int64_t b = blockIdx.x;
  const int i = threadIdx.x, lane = i % kWarp, warp = i / kWarp;
  const float v = x[b * quant::kQK_K + i];
  float best = fabsf(v);
  int idx = i;
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) {
    const float ob = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (ob > best || (ob == best && oi < idx)) {
      best = ob;
      idx = oi;
    }
  }
  if (lane == 0) {
    s_abs[warp] = best;
    s_idx[warp] = idx;
  }
  __syncthreads();
  best = s_abs[0];
  idx = s_idx[0];
  for (int w = 1; w < quant::kQK_K / kWarp; ++w) {
    if (s_abs[w] > best) {
      best = s_abs[w];
      idx = s_idx[w];
    }
  }
  BlockQ8_K& y = out[b];
  if (best == 0.0f) {
    y.qs[i] = 0;
    if (i < quant::kQK_K / 16) y.bsums[i] = 0;
    if (i == 0) y.d = 0.0f;
    return;
  }
  const float max = x[b * quant::kQK_K + idx];
  const float iscale = -127.f / max;
  const int q = min(127, __float2int_rn(__fmul_rn(iscale, v)));
  y.qs[i] = static_cast<int8_t>(q);
  s_q[i] = q;
  __syncthreads();
  if (i < quant::kQK_K / 16) {
    int sum = 0;
    for (int j = 0; j < 16; ++j) sum += s_q[16 * i + j];
    y.bsums[i] = static_cast<int16_t>(sum);
  }
  if (i == 0) y.d = 1.0f / iscale;
}

__global__ void ConvertKernel(const float* __restrict__ x, int64_t n, bool bf16,
                              uint16_t* __restrict__ out) {
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride())
    out[i] = bf16 ? ToBf16Bits(x[i]) : ToHalfBits(x[i]);
}

__global__ void GetRowsKernel(DType type, const uint8_t* __restrict__ table, size_t row_bytes,
                              int64_t cols, const int32_t* __restrict__ ids, int64_t n,
                              float* __restrict__ out, const DeviceCodebooks books) {
  const int64_t total = n * cols;
  for (int64_t k = GlobalThread(); k < total; k += GlobalStride()) {
    const int64_t r = k / cols, i = k % cols;
    out[k] = DequantElement(type, table + static_cast<size_t>(ids[r]) * row_bytes, i, books);
  }
}

__global__ void DequantizeKernel(DType type, const uint8_t* __restrict__ w, size_t row_bytes,
                                 int64_t cols, int64_t row0, int64_t n_rows, bool to_f16,
                                 void* __restrict__ out, const DeviceCodebooks books) {
  const int64_t total = n_rows * cols;
  for (int64_t k = GlobalThread(); k < total; k += GlobalStride()) {
    const int64_t r = k / cols, i = k % cols;
    const float v = DequantElement(type, w + static_cast<size_t>(row0 + r) * row_bytes, i, books);
    if (to_f16) {
      static_cast<uint16_t*>(out)[k] = ToHalfBits(v);
    } else {
      static_cast<float*>(out)[k] = v;
    }
  }
}

}  // namespace

cudaError_t QuantizeActivations(DType act_type, const float* x, int64_t n, int64_t cols, void* dst,
                                cudaStream_t stream) {
  const int64_t elems = n * cols;
  if (elems <= 0) return cudaSuccess;
  switch (act_type) {
    case DType::kQ8_0: {
      // Rows of whole blocks are contiguous, so the blocks of all rows are one array.
      const int64_t blocks = elems / quant::kQK8_0;
      QuantizeQ8_0Kernel<<<static_cast<unsigned>((blocks * kWarp + 255) / 256), 256, 0, stream>>>(
          x, blocks, static_cast<BlockQ8_0*>(dst));
      break;
    }
    case DType::kQ8_1: {
      const int64_t blocks = elems / 32;
      QuantizeQ8_1Kernel<<<static_cast<unsigned>((blocks * kWarp + 255) / 256), 256, 0, stream>>>(
          x, blocks, static_cast<BlockQ8_1*>(dst));
      break;
    }
    case DType::kQ8_K:
      QuantizeQ8_KKernel<<<static_cast<unsigned>(elems / quant::kQK_K), quant::kQK_K, 0, stream>>>(
          x, static_cast<BlockQ8_K*>(dst));
      break;
    case DType::kF16:
    case DType::kBF16: return ConvertF32(x, elems, act_type, dst, stream);
    case DType::kF32:
      return cudaMemcpyAsync(dst, x, static_cast<size_t>(elems) * sizeof(float),
                             cudaMemcpyDeviceToDevice, stream);
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t ConvertF32(const float* x, int64_t n, DType out_type, void* out, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (out_type != DType::kF16 && out_type != DType::kBF16) return cudaErrorInvalidValue;
  ConvertKernel<<<GridFor(n, 256), 256, 0, stream>>>(x, n, out_type == DType::kBF16,
                                                     static_cast<uint16_t*>(out));
  return cudaGetLastError();
}

cudaError_t GetRows(DType type, const void* table, int64_t cols, const int32_t* ids, int64_t n,
                    float* out, const DeviceCodebooks& books, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  GetRowsKernel<<<GridFor(n * cols, 256), 256, 0, stream>>>(
      type, static_cast<const uint8_t*>(table), quant::RowBytes(type, cols), cols, ids, n, out,
      books);
  return cudaGetLastError();
}

cudaError_t DequantizeRows(DType type, const void* w, int64_t cols, int64_t row0, int64_t n_rows,
                           DType out_type, void* out, const DeviceCodebooks& books,
                           cudaStream_t stream) {
  if (n_rows <= 0) return cudaSuccess;
  if (out_type != DType::kF16 && out_type != DType::kF32) return cudaErrorInvalidValue;
  DequantizeKernel<<<GridFor(n_rows * cols, 256), 256, 0, stream>>>(
      type, static_cast<const uint8_t*>(w), quant::RowBytes(type, cols), cols, row0, n_rows,
      out_type == DType::kF16, out, books);
  return cudaGetLastError();
}

cudaError_t UploadCodebooks(void** storage, DeviceCodebooks* books) {
  // One allocation, tables back to back (each size a multiple of 8 bytes, so each stays aligned).
  struct Part {
    const void* src;
    size_t bytes;
  };
  const Part parts[] = {{quant::kIq2xxsGrid.v, sizeof(quant::kIq2xxsGrid.v)},
                        {quant::kIq2xsGrid.v, sizeof(quant::kIq2xsGrid.v)},
                        {quant::kIq2sGrid.v, sizeof(quant::kIq2sGrid.v)},
                        {quant::kIq3xxsGrid.v, sizeof(quant::kIq3xxsGrid.v)},
                        {quant::kIq3sGrid.v, sizeof(quant::kIq3sGrid.v)},
                        {quant::kIq1sGrid.v, sizeof(quant::kIq1sGrid.v)},
                        {quant::kIq2xsSigns.v, sizeof(quant::kIq2xsSigns.v)},
                        {quant::kIq4nlValues, sizeof(quant::kIq4nlValues)},
                        {quant::kMxfp4Values, sizeof(quant::kMxfp4Values)}};
  size_t total = 0;
  for (const Part& p : parts) total += p.bytes;
  std::vector<uint8_t> host(total);
  size_t offsets[sizeof(parts) / sizeof(parts[0])];
  size_t off = 0;
  for (size_t k = 0; k < sizeof(parts) / sizeof(parts[0]); ++k) {
    offsets[k] = off;
    std::memcpy(host.data() + off, parts[k].src, parts[k].bytes);
    off += parts[k].bytes;
  }
  uint8_t* d = nullptr;
  if (cudaError_t e = cudaMalloc(&d, total); e != cudaSuccess) return e;
  if (cudaError_t e = cudaMemcpy(d, host.data(), total, cudaMemcpyHostToDevice); e != cudaSuccess) {
    (void)cudaFree(d);
    return e;
  }
  *storage = d;
  books->iq2xxs = reinterpret_cast<const uint64_t*>(d + offsets[0]);
  books->iq2xs = reinterpret_cast<const uint64_t*>(d + offsets[1]);
  books->iq2s = reinterpret_cast<const uint64_t*>(d + offsets[2]);
  books->iq3xxs = reinterpret_cast<const uint32_t*>(d + offsets[3]);
  books->iq3s = reinterpret_cast<const uint32_t*>(d + offsets[4]);
  books->iq1s = reinterpret_cast<const uint64_t*>(d + offsets[5]);
  books->signs = d + offsets[6];
  books->iq4nl = reinterpret_cast<const int8_t*>(d + offsets[7]);
  books->mxfp4 = reinterpret_cast<const int8_t*>(d + offsets[8]);
  return cudaSuccess;
}

}  // namespace colibri::backend::cuda
