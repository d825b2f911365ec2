// Element-wise and row ops: bias, RMSNorm, RoPE, KV stores, SwiGLU, residual adds, row gathers
// and scatters. Same formulas as the CPU backend (RMSNorm sums in double, RoPE angles in double).
#include "common.cuh"
#include "kernels.h"

namespace colibri::backend::cuda {
namespace {

__global__ void AddBiasKernel(float* __restrict__ x, const float* __restrict__ bias, int64_t n,
                              int64_t dim) {
  const int64_t total = n * dim;
  for (int64_t k = GlobalThread(); k < total; k += GlobalStride()) x[k] += bias[k % dim];
}

constexpr int kNormThreads = 256;

// One block per row; the sum of squares in double, as the CPU does.
__global__ void RmsNormKernel(const float* x, const float* __restrict__ weight, int64_t dim,
                              float eps, float* y) {
  __shared__ double partial[kNormThreads / kWarp];
  const float* xi = x + static_cast<int64_t>(blockIdx.x) * dim;
  float* yi = y + static_cast<int64_t>(blockIdx.x) * dim;
  double ss = 0;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) ss += static_cast<double>(xi[j]) * xi[j];
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (threadIdx.x % kWarp == 0) partial[threadIdx.x / kWarp] = ss;
  __syncthreads();
  double total = 0;
  for (int w = 0; w < kNormThreads / kWarp; ++w) total += partial[w];
  const float scale = static_cast<float>(1.0 / sqrt(total / static_cast<double>(dim) + eps));
  // Every thread has read the row's squares before any writes (y may alias x).
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
    yi[j] = __fmul_rn(__fmul_rn(xi[j], scale), weight[j]);
}

__global__ void RopeKernel(float* __restrict__ x, int64_t n, int64_t n_heads, int64_t head_dim,
                           const int32_t* __restrict__ positions,
                           const double* __restrict__ inv_freq, int64_t n_rot, int64_t offset,
                           bool interleaved, float mscale) {
  const int64_t half = n_rot / 2;
  const int64_t total = n * n_heads * half;
  for (int64_t k = GlobalThread(); k < total; k += GlobalStride()) {
    const int64_t i = k % half;
    const int64_t th = k / half;  // t * n_heads + h
    const int64_t t = th / n_heads;
    const double angle = static_cast<double>(positions[t]) * inv_freq[i];
    const float c = static_cast<float>(cos(angle) * mscale),
                s = static_cast<float>(sin(angle) * mscale);
    float* rot = x + th * head_dim + offset;
    float* a = interleaved ? rot + 2 * i : rot + i;
    float* b = interleaved ? rot + 2 * i + 1 : rot + i + half;
    const float x0 = *a, x1 = *b;
    *a = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    *b = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
  }
}

__global__ void StoreKvKernel(const float* __restrict__ k, const float* __restrict__ v,
                              const int32_t* __restrict__ positions, int64_t n, int64_t kv_dim,
                              float* __restrict__ k_cache, float* __restrict__ v_cache) {
  const int64_t total = n * kv_dim;
  for (int64_t idx = GlobalThread(); idx < total; idx += GlobalStride()) {
    const int64_t i = idx / kv_dim, j = idx % kv_dim;
    const int64_t dst = static_cast<int64_t>(positions[i]) * kv_dim + j;
    k_cache[dst] = k[idx];
    v_cache[dst] = v[idx];
  }
}

__global__ void SiluMulKernel(float* __restrict__ gate, const float* __restrict__ up, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) {
    const float g = gate[i];
    gate[i] = __fmul_rn(g / (1.0f + expf(-g)), up[i]);
  }
}

__global__ void ClampedSwiGluKernel(float* __restrict__ gate, const float* __restrict__ up,
                                    int64_t n, float alpha, float limit) {
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) {
    const float g = fminf(gate[i], limit);
    const float u = fminf(fmaxf(up[i], -limit), limit);
    gate[i] = (u + 1.0f) * g / (1.0f + expf(-alpha * g));
  }
}

__global__ void AddKernel(float* __restrict__ x, const float* __restrict__ y, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GlobalStride()) x[i] += y[i];
}

__global__ void GatherRowsKernel(const float* __restrict__ src, const int32_t* __restrict__ rows,
                                 int64_t n, int64_t dim, float* __restrict__ dst) {
  const int64_t total = n * dim;
  for (int64_t k = GlobalThread(); k < total; k += GlobalStride()) {
    const int64_t i = k / dim, j = k % dim;
    dst[k] = src[static_cast<int64_t>(rows[i]) * dim + j];
  }
}

// Rows are distinct (the contract), so no two threads add into one element.
__global__ void ScatterAddRowsKernel(const float* __restrict__ src,
                                     const int32_t* __restrict__ rows,
                                     const float* __restrict__ scales, int64_t n, int64_t dim,
                                     float* __restrict__ dst) {
  const int64_t total = n * dim;
  for (int64_t k = GlobalThread(); k < total; k += GlobalStride()) {
    const int64_t i = k / dim, j = k % dim;
    float& d = dst[static_cast<int64_t>(rows[i]) * dim + j];
    d = __fadd_rn(d, __fmul_rn(scales[i], src[k]));
  }
}

}  // namespace

cudaError_t AddBias(float* x, const float* bias, int64_t n, int64_t dim, cudaStream_t stream) {
  if (n * dim <= 0) return cudaSuccess;
  AddBiasKernel<<<GridFor(n * dim, 256), 256, 0, stream>>>(x, bias, n, dim);
  return cudaGetLastError();
}

cudaError_t RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
                    float* y, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  RmsNormKernel<<<static_cast<unsigned>(n), kNormThreads, 0, stream>>>(x, weight, dim, eps, y);
  return cudaGetLastError();
}

cudaError_t Rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* positions,
                 const double* inv_freq, int64_t n_rot, int64_t offset, bool interleaved,
                 float mscale, cudaStream_t stream) {
  const int64_t total = n * n_heads * (n_rot / 2);
  if (total <= 0) return cudaSuccess;
  RopeKernel<<<GridFor(total, 256), 256, 0, stream>>>(x, n, n_heads, head_dim, positions, inv_freq,
                                                      n_rot, offset, interleaved, mscale);
  return cudaGetLastError();
}

cudaError_t StoreKv(const float* k, const float* v, const int32_t* positions, int64_t n,
                    int64_t kv_dim, float* k_cache, float* v_cache, cudaStream_t stream) {
  if (n * kv_dim <= 0) return cudaSuccess;
  StoreKvKernel<<<GridFor(n * kv_dim, 256), 256, 0, stream>>>(k, v, positions, n, kv_dim, k_cache,
                                                              v_cache);
  return cudaGetLastError();
}

cudaError_t SiluMul(float* gate, const float* up, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  SiluMulKernel<<<GridFor(n, 256), 256, 0, stream>>>(gate, up, n);
  return cudaGetLastError();
}

cudaError_t ClampedSwiGlu(float* gate, const float* up, int64_t n, float alpha, float limit,
                          cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  ClampedSwiGluKernel<<<GridFor(n, 256), 256, 0, stream>>>(gate, up, n, alpha, limit);
  return cudaGetLastError();
}

cudaError_t Add(float* x, const float* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  AddKernel<<<GridFor(n, 256), 256, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}

cudaError_t GatherRows(const float* src, const int32_t* rows, int64_t n, int64_t dim, float* dst,
                       cudaStream_t stream) {
  if (n * dim <= 0) return cudaSuccess;
  GatherRowsKernel<<<GridFor(n * dim, 256), 256, 0, stream>>>(src, rows, n, dim, dst);
  return cudaGetLastError();
}

cudaError_t ScatterAddRows(const float* src, const int32_t* rows, const float* scales, int64_t n,
                           int64_t dim, float* dst, cudaStream_t stream) {
  if (n * dim <= 0) return cudaSuccess;
  ScatterAddRowsKernel<<<GridFor(n * dim, 256), 256, 0, stream>>>(src, rows, scales, n, dim, dst);
  return cudaGetLastError();
}

}  // namespace colibri::backend::cuda
