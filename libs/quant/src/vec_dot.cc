// Scalar reference dot products, activation quantization and the public VecDot dispatch.
//
// Every quantized kernel sums integer products exactly per block and applies the float scales
// once per block, in the order written here; the AVX2 k-quant kernels compute the same
// integers and use the same float expressions, so their results are bit-identical. This file
// is built with -ffp-contract=off for that reason.
#include "colibri/quant/vec_dot.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "colibri/quant/blocks.h"
#include "colibri/quant/fp16.h"
#include "kernels.h"

namespace colibri::quant {
namespace {

float DotF32(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const float*>(w);
  const auto* y = static_cast<const float*>(a);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * y[i];
  return static_cast<float>(sum);
}

float DotF16(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(F16ToF32(x[i])) * F16ToF32(y[i]);
  return static_cast<float>(sum);
}

float DotBF16(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(BF16ToF32(x[i])) * BF16ToF32(y[i]);
  return static_cast<float>(sum);
}

float DotQ8_0(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    int isum = 0;
    for (int j = 0; j < kQK8_0; ++j) isum += x[i].qs[j] * y[i].qs[j];
    sum += static_cast<float>(isum) * (F16ToF32(x[i].d) * F16ToF32(y[i].d));
  }
  return sum;
}

float DotQ8_K(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ8_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int isum = 0;
    for (int j = 0; j < kQK_K; ++j) isum += x[i].qs[j] * y[i].qs[j];
    sum += (x[i].d * y[i].d) * static_cast<float>(isum);
  }
  return sum;
}

// The float tail shared by the k-quant kernels (see vec_dot_avx2.cc, which repeats it).
inline float KBlockSum(float d, float dmin, int isum, int imin) {
  return d * static_cast<float>(isum) - dmin * static_cast<float>(imin);
}

float DotQ2_K(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ2_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int isum = 0, imin = 0;
    for (int e = 0; e < kQK_K; e += 16) {
      const int g = e / 16;
      const uint8_t* q = x[i].qs + 32 * (e / 128) + (e % 32);
      const int shift = 2 * ((e % 128) / 32);
      int gsum = 0;
      for (int l = 0; l < 16; ++l) gsum += ((q[l] >> shift) & 3) * y[i].qs[e + l];
      isum += (x[i].scales[g] & 0xF) * gsum;
      imin += (x[i].scales[g] >> 4) * y[i].bsums[g];
    }
    sum += KBlockSum(F16ToF32(x[i].d) * y[i].d, F16ToF32(x[i].dmin) * y[i].d, isum, imin);
  }
  return sum;
}

float DotQ3_K(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ3_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int isum = 0;
    for (int e = 0; e < kQK_K; e += 16) {
      const int g = e / 16;
      const int low = g < 8 ? x[i].scales[g] & 0xF : x[i].scales[g - 8] >> 4;
      const int high = (x[i].scales[8 + g % 4] >> (2 * (g / 4))) & 3;
      const int scale = (low | (high << 4)) - 32;
      const uint8_t* q = x[i].qs + 32 * (e / 128) + (e % 32);
      const uint8_t* hm = x[i].hmask + (e % 32);
      const int shift = 2 * ((e % 128) / 32);
      const int hbit = e / 32;
      int gsum = 0;
      for (int l = 0; l < 16; ++l) {
        const int v = ((q[l] >> shift) & 3) - (((hm[l] >> hbit) & 1) ? 0 : 4);
        gsum += v * y[i].qs[e + l];
      }
      isum += scale * gsum;
    }
    sum += KBlockSum(F16ToF32(x[i].d) * y[i].d, 0.f, isum, 0);
  }
  return sum;
}

inline void ScaleMinK4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

float DotQ4_K(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int isum = 0, imin = 0;
    for (int g = 0; g < 8; ++g) {
      int sc, m;
      ScaleMinK4(g, x[i].scales, &sc, &m);
      const uint8_t* q = x[i].qs + 32 * (g / 2);
      const int shift = 4 * (g % 2);
      const int8_t* act = y[i].qs + 32 * g;
      int gsum = 0;
      for (int l = 0; l < 32; ++l) gsum += ((q[l] >> shift) & 0xF) * act[l];
      isum += sc * gsum;
      imin += m * (y[i].bsums[2 * g] + y[i].bsums[2 * g + 1]);
    }
    sum += KBlockSum(F16ToF32(x[i].d) * y[i].d, F16ToF32(x[i].dmin) * y[i].d, isum, imin);
  }
  return sum;
}

float DotQ5_K(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int isum = 0, imin = 0;
    for (int g = 0; g < 8; ++g) {
      int sc, m;
      ScaleMinK4(g, x[i].scales, &sc, &m);
      const uint8_t* q = x[i].qs + 32 * (g / 2);
      const int shift = 4 * (g % 2);
      const int8_t* act = y[i].qs + 32 * g;
      int gsum = 0;
      for (int l = 0; l < 32; ++l) {
        const int v = ((q[l] >> shift) & 0xF) | (((x[i].qh[l] >> g) & 1) << 4);
        gsum += v * act[l];
      }
      isum += sc * gsum;
      imin += m * (y[i].bsums[2 * g] + y[i].bsums[2 * g + 1]);
    }
    sum += KBlockSum(F16ToF32(x[i].d) * y[i].d, F16ToF32(x[i].dmin) * y[i].d, isum, imin);
  }
  return sum;
}

float DotQ6_K(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int isum = 0;
    for (int e = 0; e < kQK_K; e += 16) {
      const int half = e / 128;
      const int quarter = (e % 128) / 32;  // which of the four 32-runs of the half
      const int offset = e % 32;
      const uint8_t* ql = x[i].ql + 64 * half + 32 * (quarter % 2) + offset;
      const uint8_t* qh = x[i].qh + 32 * half + offset;
      const int low_shift = 4 * (quarter / 2);
      const int high_shift = 2 * quarter;
      int gsum = 0;
      for (int l = 0; l < 16; ++l) {
        const int v = (((ql[l] >> low_shift) & 0xF) | (((qh[l] >> high_shift) & 3) << 4)) - 32;
        gsum += v * y[i].qs[e + l];
      }
      isum += x[i].scales[e / 16] * gsum;
    }
    sum += KBlockSum(F16ToF32(x[i].d) * y[i].d, 0.f, isum, 0);
  }
  return sum;
}

}  // namespace

namespace internal {

void FillScalarVecDot(KernelTable* table) {
  for (auto& fn : table->vec_dot) fn = nullptr;
  auto set = [table](DType t, VecDotFn fn) { table->vec_dot[static_cast<uint32_t>(t)] = fn; };
  set(DType::kF32, DotF32);
  set(DType::kF16, DotF16);
  set(DType::kBF16, DotBF16);
  set(DType::kQ8_0, DotQ8_0);
  set(DType::kQ2_K, DotQ2_K);
  set(DType::kQ3_K, DotQ3_K);
  set(DType::kQ4_K, DotQ4_K);
  set(DType::kQ5_K, DotQ5_K);
  set(DType::kQ6_K, DotQ6_K);
  set(DType::kQ8_K, DotQ8_K);
}

}  // namespace internal

void QuantizeActivations(DType vec_dot_type, const float* x, void* dst, int64_t n) {
  assert(n % Traits(vec_dot_type).block_elems == 0);
  switch (vec_dot_type) {
    case DType::kQ8_0: internal::ActiveKernels().quantize_q8_0_act(x, dst, n); return;
    case DType::kQ8_K: internal::ActiveKernels().quantize_q8_k(x, dst, n); return;
    case DType::kQ8_1: internal::QuantizeQ8_1Activations(x, dst, n); return;
    case DType::kF32: {
      std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
      return;
    }
    case DType::kF16: {
      auto* out = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) out[i] = F32ToF16(x[i]);
      return;
    }
    case DType::kBF16: {
      auto* out = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) out[i] = F32ToBF16(x[i]);
      return;
    }
    default: assert(false && "QuantizeActivations: not an activation type");
  }
}

float VecDot(DType weight_type, const void* w_row, const void* act, int64_t n) {
  assert(IsKnownDType(static_cast<uint32_t>(weight_type)));
  assert(n % Traits(weight_type).block_elems == 0);
  return internal::ActiveKernels().vec_dot[static_cast<uint32_t>(weight_type)](w_row, act, n);
}

void MatVec(DType weight_type, const void* w, size_t row_stride_bytes, int64_t rows,
            const void* act, int64_t n, float* out) {
  assert(IsKnownDType(static_cast<uint32_t>(weight_type)));
  const internal::KernelTable& table = internal::ActiveKernels();
  if (internal::MatVecFn mv = table.mat_vec[static_cast<uint32_t>(weight_type)]) {
    mv(w, row_stride_bytes, rows, act, n, out);
    return;
  }
  const internal::VecDotFn fn = table.vec_dot[static_cast<uint32_t>(weight_type)];
  const auto* base = static_cast<const uint8_t*>(w);
  for (int64_t r = 0; r < rows; ++r) {
    out[r] = fn(base + static_cast<size_t>(r) * row_stride_bytes, act, n);
  }
}

void MatVecMulti(DType weight_type, const void* w, size_t row_stride_bytes, int64_t rows,
                 std::span<const void* const> acts, int64_t n, std::span<float* const> outs) {
  assert(acts.size() == outs.size());
  const internal::KernelTable& table = internal::ActiveKernels();
  const internal::MatVecMultiFn multi = table.mat_vec_multi[static_cast<uint32_t>(weight_type)];
  size_t t = 0;
  if (multi != nullptr) {
    for (; t < acts.size(); t += internal::kMaxMultiActs) {
      const int count =
          static_cast<int>(std::min<size_t>(internal::kMaxMultiActs, acts.size() - t));
      multi(w, row_stride_bytes, rows, acts.data() + t, count, n, outs.data() + t);
    }
    return;
  }
  for (; t < acts.size(); ++t) MatVec(weight_type, w, row_stride_bytes, rows, acts[t], n, outs[t]);
}

float VecDotReference(DType weight_type, const void* w_row, const void* act, int64_t n) {
  assert(IsKnownDType(static_cast<uint32_t>(weight_type)));
  return internal::ScalarKernels().vec_dot[static_cast<uint32_t>(weight_type)](w_row, act, n);
}

std::string_view ActiveIsa() {
  return internal::kIsaNames[static_cast<int>(internal::ActiveIsaLevel())];
}

std::vector<std::string_view> SupportedIsas() {
  std::vector<std::string_view> out;
  for (int i = 0; i <= static_cast<int>(internal::BestIsa()); ++i)
    out.push_back(internal::kIsaNames[i]);
  return out;
}

bool SetKernelIsaCap(std::string_view isa) {
  internal::Isa level;
  if (!internal::ParseIsa(std::string(isa).c_str(), &level)) return false;
  internal::SetIsaCap(level);
  return true;
}

void ForceScalarKernels(bool force) {
  if (force) {
    internal::SetIsaCap(internal::Isa::kScalar);
  } else {
    internal::ResetIsaCap();
  }
}

}  // namespace colibri::quant
