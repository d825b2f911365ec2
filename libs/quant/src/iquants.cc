// Scalar reference kernels for the codebook and non-linear formats: IQ4_NL, IQ4_XS, IQ2_XXS
// (llama.cpp's i-quants) and MXFP4 (gpt-oss). Dequantization as blocks.h defines it, and dot
// products with the activations GGML pairs with each (Q8_0 for IQ4_NL and MXFP4, Q8_K for
// IQ4_XS and IQ2_XXS): exact integer sums per group, the float terms in ggml's order. Built
// with -ffp-contract=off.
#include <cstring>

#include "colibri/quant/blocks.h"
#include "colibri/quant/codebooks.h"
#include "colibri/quant/fp16.h"
#include "kernels.h"

namespace colibri::quant::internal {
namespace {

// 2^(e - 128): the MXFP4 scale halved, since kMxfp4Values holds the e2m1 levels doubled
// (GGML's E8M0 "half" conversion, denormals for e < 2 included).
float E8M0Half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e) - 1) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint8_t GridByte(uint32_t index, int j) {
  return static_cast<uint8_t>(kIq2xxsGrid.v[index] >> (8 * j));
}

// ---- IQ4_NL ------------------------------------------------------------------------------

void DequantizeIQ4_NL(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_NL*>(src);
  for (int64_t i = 0; i < n / 32; ++i, y += 32) {
    const float d = F16ToF32(x[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * kIq4nlValues[x[i].qs[j] & 0x0F];
      y[j + 16] = d * kIq4nlValues[x[i].qs[j] >> 4];
    }
  }
}

float DotIQ4_NL(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_NL*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / 32; ++i) {
    const float d = F16ToF32(y[i].d) * F16ToF32(x[i].d);
    int s1 = 0, s2 = 0;
    for (int j = 0; j < 16; ++j) {
      s1 += y[i].qs[j] * kIq4nlValues[x[i].qs[j] & 0x0F];
      s2 += y[i].qs[j + 16] * kIq4nlValues[x[i].qs[j] >> 4];
    }
    sum += d * static_cast<float>(s1 + s2);
  }
  return sum;
}

// ---- IQ4_XS ------------------------------------------------------------------------------

int Iq4xsScale(const BlockIQ4_XS& b, int g) {
  const int low = (b.scales_l[g / 2] >> (4 * (g % 2))) & 0x0F;
  const int high = (b.scales_h >> (2 * g)) & 3;
  return (low | (high << 4)) - 32;
}

void DequantizeIQ4_XS(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_XS*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(x[i].d);
    for (int g = 0; g < kQK_K / 32; ++g, y += 32) {
      const float dl = d * static_cast<float>(Iq4xsScale(x[i], g));
      const uint8_t* qs = x[i].qs + 16 * g;
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * kIq4nlValues[qs[j] & 0x0F];
        y[j + 16] = dl * kIq4nlValues[qs[j] >> 4];
      }
    }
  }
}

float DotIQ4_XS(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_XS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d4d8 = F16ToF32(x[i].d) * y[i].d;
    for (int g = 0; g < kQK_K / 32; ++g) {
      const uint8_t* qs = x[i].qs + 16 * g;
      const int8_t* q8 = y[i].qs + 32 * g;
      int s1 = 0, s2 = 0;
      for (int j = 0; j < 16; ++j) {
        s1 += q8[j] * kIq4nlValues[qs[j] & 0x0F];
        s2 += q8[j + 16] * kIq4nlValues[qs[j] >> 4];
      }
      sum += d4d8 * static_cast<float>(Iq4xsScale(x[i], g)) * static_cast<float>(s1 + s2);
    }
  }
  return sum;
}

// ---- IQ2_XXS -----------------------------------------------------------------------------

// Group g's two words: a (grid indices, one byte each) and b (signs, scale).
void Iq2xxsGroup(const BlockIQ2_XXS& blk, int g, uint32_t* a, uint32_t* b) {
  std::memcpy(a, blk.qs + 4 * g, sizeof(uint32_t));
  std::memcpy(b, blk.qs + 4 * g + 2, sizeof(uint32_t));
}

void DequantizeIQ2_XXS(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockIQ2_XXS*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(x[i].d);
    for (int g = 0; g < kQK_K / 32; ++g) {
      uint32_t a, b;
      Iq2xxsGroup(x[i], g, &a, &b);
      const float db = d * (0.5f + static_cast<float>(b >> 28)) * 0.25f;
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint32_t index = (a >> (8 * l)) & 0xFF;
        const uint8_t signs = kIq2xsSigns.v[(b >> (7 * l)) & 127];
        for (int j = 0; j < 8; ++j) {
          y[j] = db * static_cast<float>(GridByte(index, j)) * ((signs >> j) & 1 ? -1.f : 1.f);
        }
      }
    }
  }
}

float DotIQ2_XXS(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ2_XXS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(x[i].d) * y[i].d;
    const int8_t* q8 = y[i].qs;
    int32_t bsum = 0;
    for (int g = 0; g < kQK_K / 32; ++g) {
      uint32_t a, b;
      Iq2xxsGroup(x[i], g, &a, &b);
      const int32_t ls = 2 * static_cast<int32_t>(b >> 28) + 1;
      int32_t s = 0;
      for (int l = 0; l < 4; ++l, q8 += 8) {
        const uint32_t index = (a >> (8 * l)) & 0xFF;
        const uint8_t signs = kIq2xsSigns.v[(b >> (7 * l)) & 127];
        for (int j = 0; j < 8; ++j) s += GridByte(index, j) * q8[j] * ((signs >> j) & 1 ? -1 : 1);
      }
      bsum += s * ls;
    }
    sum += d * static_cast<float>(bsum);
  }
  return 0.125f * sum;
}

// ---- MXFP4 -------------------------------------------------------------------------------

void DequantizeMXFP4(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockMXFP4*>(src);
  for (int64_t i = 0; i < n / 32; ++i, y += 32) {
    const float d = E8M0Half(x[i].e);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(kMxfp4Values[x[i].qs[j] & 0x0F]) * d;
      y[j + 16] = static_cast<float>(kMxfp4Values[x[i].qs[j] >> 4]) * d;
    }
  }
}

float DotMXFP4(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockMXFP4*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / 32; ++i) {
    const float d = E8M0Half(x[i].e) * F16ToF32(y[i].d);
    int s1 = 0, s2 = 0;
    for (int j = 0; j < 16; ++j) {
      s1 += y[i].qs[j] * kMxfp4Values[x[i].qs[j] & 0x0F];
      s2 += y[i].qs[j + 16] * kMxfp4Values[x[i].qs[j] >> 4];
    }
    sum += d * static_cast<float>(s1 + s2);
  }
  return sum;
}

}  // namespace

void FillIQuantKernels(KernelTable* table) {
  SetKernels(table, 16, DequantizeIQ2_XXS, DotIQ2_XXS);
  SetKernels(table, 20, DequantizeIQ4_NL, DotIQ4_NL);
  SetKernels(table, 23, DequantizeIQ4_XS, DotIQ4_XS);
  SetKernels(table, 39, DequantizeMXFP4, DotMXFP4);
}

}  // namespace colibri::quant::internal
