// Scalar reference kernels for the codebook and non-linear formats: IQ4_NL, IQ4_XS, IQ2_XXS
// (llama.cpp's i-quants) and MXFP4 (gpt-oss). Dequantization as blocks.h defines it, and dot
// products with the activations GGML pairs with each (Q8_0 for IQ4_NL and MXFP4, Q8_K for
// IQ4_XS and IQ2_XXS): exact integer sums per group, the float terms in ggml's order. Built
// with -ffp-contract=off.
#include <cstring>

#include "colibri/quant/blocks.h"
#include "colibri/quant/fp16.h"
#include "kernels.h"

namespace colibri::quant::internal {
namespace {

// IQ2_XXS's 256 grid points: 8 magnitudes each (one byte each, from {8, 25, 43}), GGML's
// iq2xxs_grid codebook.
constexpr uint64_t kIq2xxsGrid[256] = {
    0x0808080808080808ull, 0x080808080808082bull, 0x0808080808081919ull, 0x0808080808082b08ull,
    0x0808080808082b2bull, 0x0808080808190819ull, 0x0808080808191908ull, 0x08080808082b0808ull,
    0x08080808082b082bull, 0x08080808082b2b08ull, 0x08080808082b2b2bull, 0x0808080819080819ull,
    0x0808080819081908ull, 0x0808080819190808ull, 0x0808080819192b08ull, 0x08080808192b0819ull,
    0x08080808192b1908ull, 0x080808082b080808ull, 0x080808082b08082bull, 0x080808082b082b2bull,
    0x080808082b2b082bull, 0x0808081908080819ull, 0x0808081908081908ull, 0x0808081908190808ull,
    0x0808081908191919ull, 0x0808081919080808ull, 0x080808192b081908ull, 0x080808192b192b08ull,
    0x0808082b08080808ull, 0x0808082b0808082bull, 0x0808082b082b082bull, 0x0808082b2b08082bull,
    0x0808190808080819ull, 0x0808190808081908ull, 0x0808190808190808ull, 0x08081908082b0819ull,
    0x08081908082b1908ull, 0x0808190819080808ull, 0x080819081908082bull, 0x0808190819082b08ull,
    0x08081908192b0808ull, 0x080819082b080819ull, 0x080819082b081908ull, 0x080819082b190808ull,
    0x080819082b2b1908ull, 0x0808191908080808ull, 0x080819190808082bull, 0x0808191908082b08ull,
    0x08081919082b0808ull, 0x080819191908192bull, 0x08081919192b2b19ull, 0x080819192b080808ull,
    0x080819192b190819ull, 0x0808192b08082b19ull, 0x0808192b08190808ull, 0x0808192b19080808ull,
    0x0808192b2b081908ull, 0x0808192b2b2b1908ull, 0x08082b0808080808ull, 0x08082b0808081919ull,
    0x08082b0808082b08ull, 0x08082b0808191908ull, 0x08082b08082b2b08ull, 0x08082b0819080819ull,
    0x08082b0819081908ull, 0x08082b0819190808ull, 0x08082b081919082bull, 0x08082b082b082b08ull,
    0x08082b1908081908ull, 0x08082b1919080808ull, 0x08082b2b0808082bull, 0x08082b2b08191908ull,
    0x0819080808080819ull, 0x0819080808081908ull, 0x0819080808190808ull, 0x08190808082b0819ull,
    0x0819080819080808ull, 0x08190808192b0808ull, 0x081908082b081908ull, 0x081908082b190808ull,
    0x081908082b191919ull, 0x0819081908080808ull, 0x0819081908082b08ull, 0x08190819082b0808ull,
    0x0819081919190808ull, 0x0819081919192b2bull, 0x081908192b080808ull, 0x0819082b082b1908ull,
    0x0819082b19081919ull, 0x0819190808080808ull, 0x0819190808082b08ull, 0x08191908082b0808ull,
    0x08191908082b1919ull, 0x0819190819082b19ull, 0x081919082b080808ull, 0x0819191908192b08ull,
    0x08191919192b082bull, 0x0819192b08080808ull, 0x0819192b0819192bull, 0x08192b0808080819ull,
    0x08192b0808081908ull, 0x08192b0808190808ull, 0x08192b0819080808ull, 0x08192b082b080819ull,
    0x08192b1908080808ull, 0x08192b1908081919ull, 0x08192b192b2b0808ull, 0x08192b2b19190819ull,
    0x082b080808080808ull, 0x082b08080808082bull, 0x082b080808082b2bull, 0x082b080819081908ull,
    0x082b0808192b0819ull, 0x082b08082b080808ull, 0x082b08082b08082bull, 0x082b0819082b2b19ull,
    0x082b081919082b08ull, 0x082b082b08080808ull, 0x082b082b0808082bull, 0x082b190808080819ull,
    0x082b190808081908ull, 0x082b190808190808ull, 0x082b190819080808ull, 0x082b19081919192bull,
    0x082b191908080808ull, 0x082b191919080819ull, 0x082b1919192b1908ull, 0x082b192b2b190808ull,
    0x082b2b0808082b08ull, 0x082b2b08082b0808ull, 0x082b2b082b191908ull, 0x082b2b2b19081908ull,
    0x1908080808080819ull, 0x1908080808081908ull, 0x1908080808190808ull, 0x1908080808192b08ull,
    0x19080808082b0819ull, 0x19080808082b1908ull, 0x1908080819080808ull, 0x1908080819082b08ull,
    0x190808081919192bull, 0x19080808192b0808ull, 0x190808082b080819ull, 0x190808082b081908ull,
    0x190808082b190808ull, 0x1908081908080808ull, 0x19080819082b0808ull, 0x19080819192b0819ull,
    0x190808192b080808ull, 0x190808192b081919ull, 0x1908082b08080819ull, 0x1908082b08190808ull,
    0x1908082b19082b08ull, 0x1908082b1919192bull, 0x1908082b192b2b08ull, 0x1908190808080808ull,
    0x1908190808082b08ull, 0x19081908082b0808ull, 0x190819082b080808ull, 0x190819082b192b19ull,
    0x190819190819082bull, 0x19081919082b1908ull, 0x1908192b08080808ull, 0x19082b0808080819ull,
    0x19082b0808081908ull, 0x19082b0808190808ull, 0x19082b0819080808ull, 0x19082b0819081919ull,
    0x19082b1908080808ull, 0x19082b1919192b08ull, 0x19082b19192b0819ull, 0x19082b192b08082bull,
    0x19082b2b19081919ull, 0x19082b2b2b190808ull, 0x1919080808080808ull, 0x1919080808082b08ull,
    0x1919080808190819ull, 0x1919080808192b19ull, 0x19190808082b0808ull, 0x191908082b080808ull,
    0x191908082b082b08ull, 0x1919081908081908ull, 0x191908191908082bull, 0x191908192b2b1908ull,
    0x1919082b2b190819ull, 0x191919082b190808ull, 0x191919082b19082bull, 0x1919191908082b2bull,
    0x1919192b08080819ull, 0x1919192b19191908ull, 0x19192b0808080808ull, 0x19192b0808190819ull,
    0x19192b0808192b19ull, 0x19192b08192b1908ull, 0x19192b1919080808ull, 0x19192b2b08082b08ull,
    0x192b080808081908ull, 0x192b080808190808ull, 0x192b080819080808ull, 0x192b0808192b2b08ull,
    0x192b081908080808ull, 0x192b081919191919ull, 0x192b082b08192b08ull, 0x192b082b192b0808ull,
    0x192b190808080808ull, 0x192b190808081919ull, 0x192b191908190808ull, 0x192b19190819082bull,
    0x192b19192b081908ull, 0x192b2b081908082bull, 0x2b08080808080808ull, 0x2b0808080808082bull,
    0x2b08080808082b2bull, 0x2b08080819080819ull, 0x2b0808082b08082bull, 0x2b08081908081908ull,
    0x2b08081908192b08ull, 0x2b08081919080808ull, 0x2b08082b08190819ull, 0x2b08190808080819ull,
    0x2b08190808081908ull, 0x2b08190808190808ull, 0x2b08190808191919ull, 0x2b08190819080808ull,
    0x2b081908192b0808ull, 0x2b08191908080808ull, 0x2b0819191908192bull, 0x2b0819192b191908ull,
    0x2b08192b08082b19ull, 0x2b08192b19080808ull, 0x2b08192b192b0808ull, 0x2b082b080808082bull,
    0x2b082b1908081908ull, 0x2b082b2b08190819ull, 0x2b19080808081908ull, 0x2b19080808190808ull,
    0x2b190808082b1908ull, 0x2b19080819080808ull, 0x2b1908082b2b0819ull, 0x2b1908190819192bull,
    0x2b1908192b080808ull, 0x2b19082b19081919ull, 0x2b19190808080808ull, 0x2b191908082b082bull,
    0x2b19190819081908ull, 0x2b19191919190819ull, 0x2b192b082b080819ull, 0x2b192b19082b0808ull,
    0x2b2b08080808082bull, 0x2b2b080819190808ull, 0x2b2b08082b081919ull, 0x2b2b081908082b19ull,
    0x2b2b082b08080808ull, 0x2b2b190808192b08ull, 0x2b2b2b0819190808ull, 0x2b2b2b1908081908ull,
};

// Sign patterns with an even number of negatives: 7 bits given, the 8th makes the parity even.
constexpr uint8_t SignPattern(int i) {
  int bits = 0;
  for (int b = 0; b < 7; ++b) bits += (i >> b) & 1;
  return static_cast<uint8_t>(i | ((bits & 1) << 7));
}

struct SignTable {
  uint8_t v[128];
  constexpr SignTable() : v() {
    for (int i = 0; i < 128; ++i) v[i] = SignPattern(i);
  }
};
constexpr SignTable kIq2xsSigns;
static_assert(kIq2xsSigns.v[1] == 129 && kIq2xsSigns.v[3] == 3 && kIq2xsSigns.v[127] == 255,
              "GGML's ksigns_iq2xs");

// 2^(e - 128): the MXFP4 scale halved, since kMxfp4Values holds the e2m1 levels doubled
// (GGML's E8M0 "half" conversion, denormals for e < 2 included).
float E8M0Half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e) - 1) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint8_t GridByte(uint32_t index, int j) { return static_cast<uint8_t>(kIq2xxsGrid[index] >> (8 * j)); }

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
