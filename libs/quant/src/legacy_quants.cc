// Scalar reference kernels for GGML's legacy 32-element formats Q4_0, Q4_1, Q5_0, Q5_1 (the
// formulas of blocks.h): dequantization, and dot products with the activations GGML pairs with
// them (Q8_0 for Q4_0 / Q5_0, Q8_1 for Q4_1 / Q5_1), exact integer sums per block and one float
// term per block as ggml's reference kernels. Built with -ffp-contract=off.
#include <cstring>

#include "colibri/quant/blocks.h"
#include "colibri/quant/fp16.h"
#include "kernels.h"

namespace colibri::quant::internal {
namespace {

constexpr int kBlock = 32;

// The 5-bit quant of element j (< 16) and of j + 16 from a Q5 block's nibble and high bits.
inline int Q5Low(const uint8_t* qs, uint32_t qh, int j) {
  return (qs[j] & 0x0F) | (((qh >> j) & 1) << 4);
}
inline int Q5High(const uint8_t* qs, uint32_t qh, int j) {
  return (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
}

uint32_t HighBits(const uint8_t qh[4]) {
  uint32_t v;
  std::memcpy(&v, qh, sizeof(v));
  return v;
}

void DequantizeQ4_0(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / kBlock; ++i, y += kBlock) {
    const float d = F16ToF32(x[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>((x[i].qs[j] & 0x0F) - 8) * d;
      y[j + 16] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void DequantizeQ4_1(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < n / kBlock; ++i, y += kBlock) {
    const float d = F16ToF32(x[i].d), m = F16ToF32(x[i].m);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(x[i].qs[j] & 0x0F) * d + m;
      y[j + 16] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
    }
  }
}

void DequantizeQ5_0(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < n / kBlock; ++i, y += kBlock) {
    const float d = F16ToF32(x[i].d);
    const uint32_t qh = HighBits(x[i].qh);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(Q5Low(x[i].qs, qh, j) - 16) * d;
      y[j + 16] = static_cast<float>(Q5High(x[i].qs, qh, j) - 16) * d;
    }
  }
}

void DequantizeQ5_1(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < n / kBlock; ++i, y += kBlock) {
    const float d = F16ToF32(x[i].d), m = F16ToF32(x[i].m);
    const uint32_t qh = HighBits(x[i].qh);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(Q5Low(x[i].qs, qh, j)) * d + m;
      y[j + 16] = static_cast<float>(Q5High(x[i].qs, qh, j)) * d + m;
    }
  }
}

void DequantizeQ8_1(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ8_1*>(src);
  for (int64_t i = 0; i < n / kBlock; ++i, y += kBlock) {
    const float d = F16ToF32(x[i].d);
    for (int j = 0; j < kBlock; ++j) y[j] = d * x[i].qs[j];
  }
}

float DotQ4_0(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kBlock; ++i) {
    int isum = 0;
    for (int j = 0; j < 16; ++j) {
      isum += ((x[i].qs[j] & 0x0F) - 8) * y[i].qs[j] + ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
    }
    sum += static_cast<float>(isum) * (F16ToF32(x[i].d) * F16ToF32(y[i].d));
  }
  return sum;
}

float DotQ4_1(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kBlock; ++i) {
    int isum = 0;
    for (int j = 0; j < 16; ++j)
      isum += (x[i].qs[j] & 0x0F) * y[i].qs[j] + (x[i].qs[j] >> 4) * y[i].qs[j + 16];
    sum += (F16ToF32(x[i].d) * F16ToF32(y[i].d)) * static_cast<float>(isum) +
           F16ToF32(x[i].m) * F16ToF32(y[i].s);
  }
  return sum;
}

float DotQ5_0(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kBlock; ++i) {
    const uint32_t qh = HighBits(x[i].qh);
    int isum = 0;
    for (int j = 0; j < 16; ++j) {
      isum += (Q5Low(x[i].qs, qh, j) - 16) * y[i].qs[j] +
              (Q5High(x[i].qs, qh, j) - 16) * y[i].qs[j + 16];
    }
    sum += (F16ToF32(x[i].d) * F16ToF32(y[i].d)) * static_cast<float>(isum);
  }
  return sum;
}

float DotQ5_1(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kBlock; ++i) {
    const uint32_t qh = HighBits(x[i].qh);
    int isum = 0;
    for (int j = 0; j < 16; ++j) {
      isum += Q5Low(x[i].qs, qh, j) * y[i].qs[j] + Q5High(x[i].qs, qh, j) * y[i].qs[j + 16];
    }
    sum += (F16ToF32(x[i].d) * F16ToF32(y[i].d)) * static_cast<float>(isum) +
           F16ToF32(x[i].m) * F16ToF32(y[i].s);
  }
  return sum;
}

float DotQ8_1(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ8_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kBlock; ++i) {
    int isum = 0;
    for (int j = 0; j < kBlock; ++j) isum += x[i].qs[j] * y[i].qs[j];
    sum += static_cast<float>(isum) * (F16ToF32(x[i].d) * F16ToF32(y[i].d));
  }
  return sum;
}

}  // namespace

void FillLegacyQuantKernels(KernelTable* table) {
  SetKernels(table, 2, DequantizeQ4_0, DotQ4_0);
  SetKernels(table, 3, DequantizeQ4_1, DotQ4_1);
  SetKernels(table, 6, DequantizeQ5_0, DotQ5_0);
  SetKernels(table, 7, DequantizeQ5_1, DotQ5_1);
  SetKernels(table, 9, DequantizeQ8_1, DotQ8_1);
}

}  // namespace colibri::quant::internal
