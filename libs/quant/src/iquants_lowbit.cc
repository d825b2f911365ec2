// Scalar reference kernels for the codebook i-quants below 4 bits: IQ3_XXS, IQ3_S, IQ2_XS, IQ2_S,
// IQ1_S and IQ1_M. Dequantization as blocks.h defines it; dot products with Q8_K activations
// the way GGML's generic kernels compute them (exact integer sums per group, then one float
// expression per block in GGML's order), so results match llama.cpp's CPU backend bit for bit
// on the same blocks. Built with -ffp-contract=off.
#include <cstring>

#include "colibri/quant/blocks.h"
#include "colibri/quant/codebooks.h"
#include "colibri/quant/fp16.h"
#include "kernels.h"

namespace colibri::quant::internal {
namespace {

constexpr float kIq1Delta = 0.125f;  // GGML's IQ1S_DELTA (also IQ1_M's)

template <typename T>
uint8_t Byte(T point, int j) {
  return static_cast<uint8_t>(point >> (8 * j));
}
int8_t SignedByte(uint64_t point, int j) { return static_cast<int8_t>(Byte(point, j)); }
int Sign(uint8_t signs, int j) { return (signs >> j) & 1 ? -1 : 1; }
float SignF(uint8_t signs, int j) { return (signs >> j) & 1 ? -1.f : 1.f; }

// ---- IQ2_XS ------------------------------------------------------------------------------

void DequantizeIQ2_XS(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockIQ2_XS*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(x[i].d);
    for (int g = 0; g < kQK_K / 32; ++g) {
      const float db[2] = {d * (0.5f + static_cast<float>(x[i].scales[g] & 0x0F)) * 0.25f,
                           d * (0.5f + static_cast<float>(x[i].scales[g] >> 4)) * 0.25f};
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint16_t q = x[i].qs[4 * g + l];
        const uint64_t point = kIq2xsGrid.v[q & 511];
        const uint8_t signs = kIq2xsSigns.v[q >> 9];
        for (int j = 0; j < 8; ++j)
          y[j] = db[l / 2] * static_cast<float>(Byte(point, j)) * SignF(signs, j);
      }
    }
  }
}

float DotIQ2_XS(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ2_XS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(x[i].d) * y[i].d;
    const int8_t* q8 = y[i].qs;
    int32_t bsum = 0;
    for (int g = 0; g < kQK_K / 32; ++g) {
      for (int half = 0; half < 2; ++half) {
        const int32_t ls = 2 * ((x[i].scales[g] >> (4 * half)) & 0x0F) + 1;
        int32_t s = 0;
        for (int l = 2 * half; l < 2 * half + 2; ++l, q8 += 8) {
          const uint16_t q = x[i].qs[4 * g + l];
          const uint64_t point = kIq2xsGrid.v[q & 511];
          const uint8_t signs = kIq2xsSigns.v[q >> 9];
          for (int j = 0; j < 8; ++j) s += Byte(point, j) * q8[j] * Sign(signs, j);
        }
        bsum += s * ls;
      }
    }
    sum += d * static_cast<float>(bsum);
  }
  return 0.125f * sum;
}

// ---- IQ2_S -------------------------------------------------------------------------------

uint32_t Iq2sIndex(const BlockIQ2_S& b, int g, int l) {
  return b.qs[4 * g + l] | ((static_cast<uint32_t>(b.qh[g]) << (8 - 2 * l)) & 0x300);
}

void DequantizeIQ2_S(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockIQ2_S*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(x[i].d);
    const uint8_t* signs = x[i].qs + kQK_K / 8;
    for (int g = 0; g < kQK_K / 32; ++g) {
      const float db[2] = {d * (0.5f + static_cast<float>(x[i].scales[g] & 0x0F)) * 0.25f,
                           d * (0.5f + static_cast<float>(x[i].scales[g] >> 4)) * 0.25f};
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint64_t point = kIq2sGrid.v[Iq2sIndex(x[i], g, l)];
        for (int j = 0; j < 8; ++j) {
          y[j] = db[l / 2] * static_cast<float>(Byte(point, j)) * SignF(signs[4 * g + l], j);
        }
      }
    }
  }
}

float DotIQ2_S(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ2_S*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(x[i].d) * y[i].d;
    const int8_t* q8 = y[i].qs;
    const uint8_t* signs = x[i].qs + kQK_K / 8;
    int32_t bsum = 0;
    for (int g = 0; g < kQK_K / 32; ++g) {
      const int32_t ls1 = 1 + 2 * (x[i].scales[g] & 0x0F);
      const int32_t ls2 = 1 + 2 * (x[i].scales[g] >> 4);
      int32_t s[2] = {0, 0};
      for (int l = 0; l < 4; ++l, q8 += 8) {
        const uint64_t point = kIq2sGrid.v[Iq2sIndex(x[i], g, l)];
        for (int j = 0; j < 8; ++j) s[l / 2] += q8[j] * Byte(point, j) * Sign(signs[4 * g + l], j);
      }
      bsum += ls1 * s[0] + ls2 * s[1];
    }
    sum += d * static_cast<float>(bsum);
  }
  return 0.125f * sum;
}

// ---- IQ3_XXS -----------------------------------------------------------------------------

uint32_t Iq3xxsSignsAndScale(const BlockIQ3_XXS& b, int g) {
  uint32_t v;
  std::memcpy(&v, b.qs + kQK_K / 4 + 4 * g, sizeof(v));
  return v;
}

void DequantizeIQ3_XXS(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockIQ3_XXS*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(x[i].d);
    for (int g = 0; g < kQK_K / 32; ++g) {
      const uint32_t aux = Iq3xxsSignsAndScale(x[i], g);
      const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint8_t signs = kIq2xsSigns.v[(aux >> (7 * l)) & 127];
        const uint32_t p1 = kIq3xxsGrid.v[x[i].qs[8 * g + 2 * l]];
        const uint32_t p2 = kIq3xxsGrid.v[x[i].qs[8 * g + 2 * l + 1]];
        for (int j = 0; j < 4; ++j) {
          y[j] = db * static_cast<float>(Byte(p1, j)) * SignF(signs, j);
          y[j + 4] = db * static_cast<float>(Byte(p2, j)) * SignF(signs, j + 4);
        }
      }
    }
  }
}

float DotIQ3_XXS(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ3_XXS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(x[i].d) * y[i].d;
    const int8_t* q8 = y[i].qs;
    int32_t bsum = 0;
    for (int g = 0; g < kQK_K / 32; ++g) {
      const uint32_t aux = Iq3xxsSignsAndScale(x[i], g);
      const int32_t ls = 2 * static_cast<int32_t>(aux >> 28) + 1;
      int32_t s = 0;
      for (int l = 0; l < 4; ++l, q8 += 8) {
        const uint8_t signs = kIq2xsSigns.v[(aux >> (7 * l)) & 127];
        const uint32_t p1 = kIq3xxsGrid.v[x[i].qs[8 * g + 2 * l]];
        const uint32_t p2 = kIq3xxsGrid.v[x[i].qs[8 * g + 2 * l + 1]];
        for (int j = 0; j < 4; ++j) {
          s += Byte(p1, j) * q8[j] * Sign(signs, j);
          s += Byte(p2, j) * q8[j + 4] * Sign(signs, j + 4);
        }
      }
      bsum += s * ls;
    }
    sum += d * static_cast<float>(bsum);
  }
  return 0.25f * sum;
}

// ---- IQ3_S -------------------------------------------------------------------------------

uint32_t Iq3sPoint(const BlockIQ3_S& b, int k) {
  return kIq3sGrid.v[b.qs[k] | (((b.qh[k / 8] >> (k % 8)) & 1) << 8)];
}

void DequantizeIQ3_S(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockIQ3_S*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(x[i].d);
    for (int g = 0; g < kQK_K / 32; ++g) {
      const float db =
          d * static_cast<float>(1 + 2 * ((x[i].scales[g / 2] >> (4 * (g % 2))) & 0x0F));
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint8_t signs = x[i].signs[4 * g + l];
        const uint32_t p1 = Iq3sPoint(x[i], 8 * g + 2 * l);
        const uint32_t p2 = Iq3sPoint(x[i], 8 * g + 2 * l + 1);
        for (int j = 0; j < 4; ++j) {
          y[j] = db * static_cast<float>(Byte(p1, j)) * SignF(signs, j);
          y[j + 4] = db * static_cast<float>(Byte(p2, j)) * SignF(signs, j + 4);
        }
      }
    }
  }
}

float DotIQ3_S(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ3_S*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(x[i].d) * y[i].d;
    const int8_t* q8 = y[i].qs;
    int32_t bsum = 0;
    for (int g = 0; g < kQK_K / 32; ++g) {
      const int32_t ls = 2 * ((x[i].scales[g / 2] >> (4 * (g % 2))) & 0x0F) + 1;
      int32_t s = 0;
      for (int l = 0; l < 4; ++l, q8 += 8) {
        const uint8_t signs = x[i].signs[4 * g + l];
        const uint32_t p1 = Iq3sPoint(x[i], 8 * g + 2 * l);
        const uint32_t p2 = Iq3sPoint(x[i], 8 * g + 2 * l + 1);
        for (int j = 0; j < 4; ++j) {
          s += Byte(p1, j) * q8[j] * Sign(signs, j);
          s += Byte(p2, j) * q8[j + 4] * Sign(signs, j + 4);
        }
      }
      bsum += s * ls;
    }
    sum += d * static_cast<float>(bsum);
  }
  return sum;
}

// ---- IQ1_S -------------------------------------------------------------------------------

uint64_t Iq1sPoint(const BlockIQ1_S& b, int g, int l) {
  return kIq1sGrid.v[b.qs[4 * g + l] | (((b.qh[g] >> (3 * l)) & 7) << 8)];
}

void DequantizeIQ1_S(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockIQ1_S*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(x[i].d);
    for (int g = 0; g < kQK_K / 32; ++g) {
      const float dl = d * static_cast<float>(2 * ((x[i].qh[g] >> 12) & 7) + 1);
      const float delta = x[i].qh[g] & 0x8000 ? -kIq1Delta : kIq1Delta;
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint64_t point = Iq1sPoint(x[i], g, l);
        for (int j = 0; j < 8; ++j) y[j] = dl * (static_cast<float>(SignedByte(point, j)) + delta);
      }
    }
  }
}

float DotIQ1_S(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ1_S*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const int8_t* q8 = y[i].qs;
    int32_t sumi = 0, sumi1 = 0;
    for (int g = 0; g < kQK_K / 32; ++g) {
      const int32_t ls = 2 * ((x[i].qh[g] >> 12) & 7) + 1;
      const int32_t delta = x[i].qh[g] & 0x8000 ? -1 : 1;
      int32_t lsum = 0;
      for (int l = 0; l < 4; ++l, q8 += 8) {
        const uint64_t point = Iq1sPoint(x[i], g, l);
        for (int j = 0; j < 8; ++j) lsum += q8[j] * SignedByte(point, j);
      }
      sumi += ls * lsum;
      sumi1 += ls * delta * (y[i].bsums[2 * g] + y[i].bsums[2 * g + 1]);
    }
    sum += F16ToF32(x[i].d) * y[i].d *
           (static_cast<float>(sumi) + kIq1Delta * static_cast<float>(sumi1));
  }
  return sum;
}

// ---- IQ1_M -------------------------------------------------------------------------------

// The four scale words; the f16 super-scale is their top nibbles, word 0 lowest.
struct Iq1mScales {
  uint16_t sc[4];
  float d;
};

Iq1mScales Iq1mScalesOf(const BlockIQ1_M& b) {
  Iq1mScales s;
  std::memcpy(s.sc, b.scales, sizeof(s.sc));
  const uint16_t bits = static_cast<uint16_t>((s.sc[0] >> 12) | ((s.sc[1] >> 8) & 0x00F0) |
                                              ((s.sc[2] >> 4) & 0x0F00) | (s.sc[3] & 0xF000));
  s.d = F16ToF32(bits);
  return s;
}

// 2s + 1 for the 16 values `half` (0, 1) of group g.
int Iq1mScale(const Iq1mScales& s, int g, int half) {
  return 2 * ((s.sc[g / 2] >> (6 * (g % 2) + 3 * half)) & 7) + 1;
}

uint64_t Iq1mPoint(const BlockIQ1_M& b, int g, int l) {
  const uint32_t qh = b.qh[2 * g + l / 2];
  return kIq1sGrid.v[b.qs[4 * g + l] | (((qh >> (4 * (l % 2))) & 7) << 8)];
}

bool Iq1mShiftNegative(const BlockIQ1_M& b, int g, int l) {
  return (b.qh[2 * g + l / 2] >> (4 * (l % 2) + 3)) & 1;
}

void DequantizeIQ1_M(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockIQ1_M*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const Iq1mScales s = Iq1mScalesOf(x[i]);
    for (int g = 0; g < kQK_K / 32; ++g) {
      const float dl[2] = {s.d * static_cast<float>(Iq1mScale(s, g, 0)),
                           s.d * static_cast<float>(Iq1mScale(s, g, 1))};
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint64_t point = Iq1mPoint(x[i], g, l);
        const float delta = Iq1mShiftNegative(x[i], g, l) ? -kIq1Delta : kIq1Delta;
        for (int j = 0; j < 8; ++j)
          y[j] = dl[l / 2] * (static_cast<float>(SignedByte(point, j)) + delta);
      }
    }
  }
}

float DotIQ1_M(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ1_M*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const Iq1mScales s = Iq1mScalesOf(x[i]);
    const int8_t* q8 = y[i].qs;
    int32_t sumi1 = 0, sumi2 = 0;
    for (int g = 0; g < kQK_K / 32; ++g) {
      int32_t grid_sum[2] = {0, 0}, shift_sum[2] = {0, 0};
      for (int l = 0; l < 4; ++l, q8 += 8) {
        const uint64_t point = Iq1mPoint(x[i], g, l);
        int32_t lsum1 = 0, lsum2 = 0;
        for (int j = 0; j < 8; ++j) {
          lsum1 += q8[j] * SignedByte(point, j);
          lsum2 += q8[j];
        }
        grid_sum[l / 2] += lsum1;
        shift_sum[l / 2] += lsum2 * (Iq1mShiftNegative(x[i], g, l) ? -1 : 1);
      }
      const int32_t ls1 = Iq1mScale(s, g, 0), ls2 = Iq1mScale(s, g, 1);
      sumi1 += grid_sum[0] * ls1 + grid_sum[1] * ls2;
      sumi2 += shift_sum[0] * ls1 + shift_sum[1] * ls2;
    }
    sum += s.d * y[i].d * (static_cast<float>(sumi1) + kIq1Delta * static_cast<float>(sumi2));
  }
  return sum;
}

}  // namespace

void FillLowBitIQuantKernels(KernelTable* table) {
  SetKernels(table, 17, DequantizeIQ2_XS, DotIQ2_XS);
  SetKernels(table, 18, DequantizeIQ3_XXS, DotIQ3_XXS);
  SetKernels(table, 19, DequantizeIQ1_S, DotIQ1_S);
  SetKernels(table, 21, DequantizeIQ3_S, DotIQ3_S);
  SetKernels(table, 22, DequantizeIQ2_S, DotIQ2_S);
  SetKernels(table, 29, DequantizeIQ1_M, DotIQ1_M);
}

}  // namespace colibri::quant::internal
