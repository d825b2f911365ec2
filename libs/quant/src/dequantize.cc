// Scalar reference dequantizers (the formulas of blocks.h, in GGML's float operation order so
// results match dequantize_row_* bit for bit) and the public DequantizeRow dispatch.
#include <cassert>
#include <cstring>

#include "colibri/quant/blocks.h"
#include "colibri/quant/fp16.h"
#include "colibri/quant/quantize.h"
#include "kernels.h"

namespace colibri::quant {
namespace {

void DequantizeF32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void DequantizeF16(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(x[i]);
}

void DequantizeBF16(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = BF16ToF32(x[i]);
}

void DequantizeQ8_0(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK8_0; ++i, y += kQK8_0) {
    const float d = F16ToF32(x[i].d);
    for (int j = 0; j < kQK8_0; ++j) y[j] = d * x[i].qs[j];
  }
}

void DequantizeQ8_K(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    for (int j = 0; j < kQK_K; ++j) y[j] = x[i].d * x[i].qs[j];
  }
}

void DequantizeQ2_K(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ2_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(x[i].d);
    const float dmin = F16ToF32(x[i].dmin);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = x[i].qs + 32 * half;
      for (int shift_index = 0; shift_index < 4; ++shift_index) {
        const int shift = 2 * shift_index;
        for (int part = 0; part < 2; ++part) {  // two groups of 16 share each byte run
          const uint8_t sc = x[i].scales[8 * half + 2 * shift_index + part];
          const float dl = d * (sc & 0xF);
          const float ml = dmin * (sc >> 4);
          for (int l = 0; l < 16; ++l) *y++ = dl * ((q[16 * part + l] >> shift) & 3) - ml;
        }
      }
    }
  }
}

// The 16 signed 6-bit scales of a Q3_K block, bias removed.
void UnpackQ3Scales(const uint8_t* packed, int* out) {
  for (int g = 0; g < 16; ++g) {
    const int low = g < 8 ? packed[g] & 0xF : packed[g - 8] >> 4;
    const int high = (packed[8 + g % 4] >> (2 * (g / 4))) & 3;
    out[g] = (low | (high << 4)) - 32;
  }
}

void DequantizeQ3_K(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ3_K*>(src);
  int scales[16];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d_all = F16ToF32(x[i].d);
    UnpackQ3Scales(x[i].scales, scales);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = x[i].qs + 32 * half;
      for (int shift_index = 0; shift_index < 4; ++shift_index) {
        const int shift = 2 * shift_index;
        const uint8_t high_bit = static_cast<uint8_t>(1u << (4 * half + shift_index));
        for (int part = 0; part < 2; ++part) {
          const float dl = d_all * scales[8 * half + 2 * shift_index + part];
          for (int l = 16 * part; l < 16 * part + 16; ++l) {
            const int v = ((q[l] >> shift) & 3) - ((x[i].hmask[l] & high_bit) ? 0 : 4);
            *y++ = dl * v;
          }
        }
      }
    }
  }
}

// 6-bit scale and min of group j of a Q4_K/Q5_K block (blocks.h).
inline void ScaleMinK4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void DequantizeQ4_K(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(x[i].d);
    const float dmin = F16ToF32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int j = 0; j < 8; j += 2, q += 32) {
      int sc, m;
      ScaleMinK4(j, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      ScaleMinK4(j + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    }
  }
}

void DequantizeQ5_K(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(x[i].d);
    const float dmin = F16ToF32(x[i].dmin);
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    for (int j = 0; j < 8; j += 2, ql += 32) {
      int sc, m;
      ScaleMinK4(j, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      ScaleMinK4(j + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      const uint8_t bit1 = static_cast<uint8_t>(1u << j), bit2 = static_cast<uint8_t>(2u << j);
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + ((qh[l] & bit1) ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + ((qh[l] & bit2) ? 16 : 0)) - m2;
    }
  }
}

void DequantizeQ6_K(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(x[i].d);
    for (int half = 0; half < 2; ++half, y += 128) {
      const uint8_t* ql = x[i].ql + 64 * half;
      const uint8_t* qh = x[i].qh + 32 * half;
      const int8_t* sc = x[i].scales + 8 * half;
      for (int l = 0; l < 32; ++l) {
        const int g = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[g] * q1;
        y[l + 32] = d * sc[g + 2] * q2;
        y[l + 64] = d * sc[g + 4] * q3;
        y[l + 96] = d * sc[g + 6] * q4;
      }
    }
  }
}

}  // namespace

namespace internal {

void FillScalarDequantize(KernelTable* table) {
  for (auto& fn : table->dequantize) fn = nullptr;
  auto set = [table](DType t, DequantizeFn fn) {
    table->dequantize[static_cast<uint32_t>(t)] = fn;
  };
  set(DType::kF32, DequantizeF32);
  set(DType::kF16, DequantizeF16);
  set(DType::kBF16, DequantizeBF16);
  set(DType::kQ8_0, DequantizeQ8_0);
  set(DType::kQ2_K, DequantizeQ2_K);
  set(DType::kQ3_K, DequantizeQ3_K);
  set(DType::kQ4_K, DequantizeQ4_K);
  set(DType::kQ5_K, DequantizeQ5_K);
  set(DType::kQ6_K, DequantizeQ6_K);
  set(DType::kQ8_K, DequantizeQ8_K);
}

}  // namespace internal

void DequantizeRow(DType type, const void* src, float* dst, int64_t n) {
  assert(IsKnownDType(static_cast<uint32_t>(type)));
  assert(n % Traits(type).block_elems == 0);
  internal::ActiveKernels().dequantize[static_cast<uint32_t>(type)](src, dst, n);
}

void DequantizeRowReference(DType type, const void* src, float* dst, int64_t n) {
  assert(IsKnownDType(static_cast<uint32_t>(type)));
  assert(n % Traits(type).block_elems == 0);
  internal::ScalarKernels().dequantize[static_cast<uint32_t>(type)](src, dst, n);
}

}  // namespace colibri::quant
