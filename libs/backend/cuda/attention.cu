// Causal attention for decode and prefill: one thread block per (query row, head); its warps
// take every kAttnWarps-th key of the query's range (all earlier positions, or its sliding
// window) with an online softmax each (memory O(head_dim) whatever the context), then the warps'
// partial results are merged, with the head's sink logit (if any) joining the denominator.
// Lanes hold head_dim / 32 dimensions.
#include <cfloat>

#include "common.cuh"
#include "kernels.h"

namespace colibri::backend::cuda {
namespace {

constexpr int kAttnWarps = 4;
constexpr int kDimsPerLane = kMaxHeadDim / kWarp;

__global__ void __launch_bounds__(kAttnWarps* kWarp)
    AttentionKernel(const float* __restrict__ q, const float* __restrict__ k_cache,
                    const float* __restrict__ v_cache, const int32_t* __restrict__ positions,
                    AttentionShape shape, float* __restrict__ out) {
  const int64_t n_heads = shape.n_heads, n_kv_heads = shape.n_kv_heads, head_dim = shape.head_dim;
  const float scale = shape.scale;
  __shared__ float s_m[kAttnWarps], s_l[kAttnWarps];
  __shared__ float s_acc[kAttnWarps][kMaxHeadDim];
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t group = n_heads / n_kv_heads;
  const int64_t kvh = h / group;
  const int64_t kv_dim = n_kv_heads * head_dim;
  const float* qh = q + (t * n_heads + h) * head_dim;
  float qr[kDimsPerLane], acc[kDimsPerLane];
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) {
    const int64_t d = lane + static_cast<int64_t>(i) * kWarp;
    qr[i] = d < head_dim ? qh[d] : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -FLT_MAX, l = 0.0f;
  bool any = false;
  const int64_t last = positions[t];
  const int64_t first =
      shape.window > 0 ? max(static_cast<int64_t>(0), last + 1 - shape.window) : 0;
  for (int64_t j = first + warp; j <= last; j += kAttnWarps) {
    const int64_t row = shape.ring > 0 ? j % shape.ring : j;
    const float* kj = k_cache + row * kv_dim + kvh * head_dim;
    const float* vj = v_cache + row * kv_dim + kvh * head_dim;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int64_t d = lane + static_cast<int64_t>(i) * kWarp;
      if (d < head_dim) s += qr[i] * kj[d];
    }
    s = WarpSum(s) * scale;
    if (!any || s > m) {
      const float corr = any ? expf(m - s) : 0.0f;
      l *= corr;
#pragma unroll
      for (int i = 0; i < kDimsPerLane; ++i) acc[i] *= corr;
      m = s;
      any = true;
    }
    const float p = expf(s - m);
    l += p;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int64_t d = lane + static_cast<int64_t>(i) * kWarp;
      if (d < head_dim) acc[i] += p * vj[d];
    }
  }
  if (lane == 0) {
    s_m[warp] = any ? m : -FLT_MAX;
    s_l[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) {
    const int64_t d = lane + static_cast<int64_t>(i) * kWarp;
    if (d < head_dim) s_acc[warp][d] = acc[i];
  }
  __syncthreads();
  float mx = -FLT_MAX;
  for (int w = 0; w < kAttnWarps; ++w) mx = fmaxf(mx, s_m[w]);
  if (shape.sinks != nullptr) mx = fmaxf(mx, shape.sinks[h]);
  float total_l = shape.sinks != nullptr ? expf(shape.sinks[h] - mx) : 0.0f, wscale[kAttnWarps];
  for (int w = 0; w < kAttnWarps; ++w) {
    wscale[w] = s_l[w] > 0.0f ? expf(s_m[w] - mx) : 0.0f;
    total_l += s_l[w] * wscale[w];
  }
  const float inv = total_l > 0.0f ? 1.0f / total_l : 0.0f;
  float* o = out + (t * n_heads + h) * head_dim;
  for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float sum = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) sum += s_acc[w][d] * wscale[w];
    o[d] = sum * inv;
  }
}

}  // namespace

cudaError_t Attention(const float* q, const float* k_cache, const float* v_cache,
                      const int32_t* positions, int64_t n, const AttentionShape& shape, float* out,
                      cudaStream_t stream) {
  if (n <= 0 || shape.n_heads <= 0) return cudaSuccess;
  if (shape.head_dim > kMaxHeadDim || shape.n_kv_heads <= 0 ||
      shape.n_heads % shape.n_kv_heads != 0 || shape.n_heads > 65535 || shape.window < 0 ||
      shape.ring < 0) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(shape.n_heads));
  AttentionKernel<<<grid, kAttnWarps * kWarp, 0, stream>>>(q, k_cache, v_cache, positions, shape,
                                                           out);
  return cudaGetLastError();
}

}  // namespace colibri::backend::cuda
