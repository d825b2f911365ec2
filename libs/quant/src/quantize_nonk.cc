// Reference quantizers for the legacy 32-element formats and the non-linear ones:
// Q4_0, Q4_1, Q5_0, Q5_1 as GGML's reference quantizers define them (absmax / min-max grids,
// GGML's rounding), and IQ4_NL, IQ4_XS and MXFP4 by our own searches: each 32-element group
// takes the scale (from a small set of candidates around the one that maps its largest value to
// the codebook's end) with the least squared error, refit by least squares. Built with
// -ffp-contract=off, deterministic.
#include <cmath>
#include <cstring>

#include "colibri/quant/blocks.h"
#include "colibri/quant/fp16.h"
#include "kernels.h"

namespace colibri::quant::internal {
namespace {

// Largest |x| of a group and the signed value that has it.
void AbsMax(const float* x, int n, float* amax, float* max) {
  *amax = 0;
  *max = 0;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > *amax) {
      *amax = std::fabs(x[j]);
      *max = x[j];
    }
  }
}

void MinMax(const float* x, int n, float* lo, float* hi) {
  *lo = x[0];
  *hi = x[0];
  for (int j = 1; j < n; ++j) {
    if (x[j] < *lo) *lo = x[j];
    if (x[j] > *hi) *hi = x[j];
  }
}

int ClampInt(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// The non-linear codebooks in ascending order, with the original nibble of each entry, and a
// table for finding the nearest entry without a search: the midpoints m between neighbouring
// values are multiples of 1/2, so for t = floor(2v) the entries below v are the midpoints with
// 2m <= t (cnt_le[t]), less one when v is exactly a midpoint (ties go to the lower entry).
struct SortedBook {
  static constexpr int kLutHalf = 256;  // t in [-256, 255] covers every midpoint of an int8 book
  int8_t values[16];
  uint8_t nibble[16];
  int count;
  uint8_t cnt_le[2 * kLutHalf];
  bool is_mid[2 * kLutHalf];
};

SortedBook Sorted(const int8_t* book) {
  SortedBook s{};
  s.count = 0;
  for (int k = 0; k < 16; ++k) {
    bool dup = false;
    for (int m = 0; m < s.count; ++m) dup |= s.values[m] == book[k];
    if (dup) continue;  // MXFP4's -0
    int pos = s.count++;
    while (pos > 0 && s.values[pos - 1] > book[k]) {
      s.values[pos] = s.values[pos - 1];
      s.nibble[pos] = s.nibble[pos - 1];
      --pos;
    }
    s.values[pos] = book[k];
    s.nibble[pos] = static_cast<uint8_t>(k);
  }
  for (int t = -SortedBook::kLutHalf; t < SortedBook::kLutHalf; ++t) {
    int below = 0;
    bool mid = false;
    for (int m = 0; m + 1 < s.count; ++m) {
      const int twice_mid = s.values[m] + s.values[m + 1];
      below += twice_mid <= t;
      mid |= twice_mid == t;
    }
    s.cnt_le[t + SortedBook::kLutHalf] = static_cast<uint8_t>(below);
    s.is_mid[t + SortedBook::kLutHalf] = mid;
  }
  return s;
}

// Index (in book.values) of the entry nearest to v, ties to the lower one.
int NearestLevel(const SortedBook& book, float v) {
  const float v2 = 2 * v;
  const float t = std::floor(v2);
  if (!(t >= -SortedBook::kLutHalf)) return 0;  // also NaN
  if (t >= SortedBook::kLutHalf) return book.count - 1;
  const int k = static_cast<int>(t) + SortedBook::kLutHalf;
  return book.cnt_le[k] - (v2 == t && book.is_mid[k] ? 1 : 0);
}

// Best scale for x ~ scale * book[L] over a group of 32 (weights x^2 + small floor), trying
// the scales that map the group's largest value onto each of the book's outer levels and 7
// steps around them; nibbles into L. Returns 0 for an all-zero group.
float FitCodebookScale(const float* x, const SortedBook& book, uint8_t* L) {
  float amax, max;
  AbsMax(x, 32, &amax, &max);
  if (amax < 1e-15f) {
    for (int j = 0; j < 32; ++j) L[j] = book.nibble[NearestLevel(book, 0)];
    return 0;
  }
  float w[32];
  for (int j = 0; j < 32; ++j) w[j] = x[j] * x[j] + 1e-6f * amax * amax;
  float best_scale = 0, best_score = -1;
  const float ends[2] = {static_cast<float>(book.values[0]),
                         static_cast<float>(book.values[book.count - 1])};
  for (float end : ends) {
    for (int step = -7; step <= 7; ++step) {
      const float target = end + 0.1f * static_cast<float>(step) * (end < 0 ? -1.f : 1.f);
      if (target == 0) continue;
      const float inv = target / max;
      float sumqx = 0, sumq2 = 0;
      for (int j = 0; j < 32; ++j) {
        const float q = book.values[NearestLevel(book, inv * x[j])];
        sumqx += w[j] * q * x[j];
        sumq2 += w[j] * q * q;
      }
      if (sumq2 > 0 && sumqx * sumqx / sumq2 > best_score) {
        best_score = sumqx * sumqx / sumq2;
        best_scale = sumqx / sumq2;
      }
    }
  }
  const float inv = best_scale != 0 ? 1 / best_scale : 0;
  for (int j = 0; j < 32; ++j) L[j] = book.nibble[NearestLevel(book, inv * x[j])];
  return best_scale;
}

void PackNibbles(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
}

}  // namespace

void QuantizeQ4_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_0*>(dst);
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    float amax, max;
    AbsMax(x, 32, &amax, &max);
    const float d = max / -8;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = F32ToF16(d);
    for (int j = 0; j < 16; ++j) {
      const int a = ClampInt(static_cast<int8_t>(x[j] * id + 8.5f), 0, 15);
      const int b = ClampInt(static_cast<int8_t>(x[j + 16] * id + 8.5f), 0, 15);
      y[i].qs[j] = static_cast<uint8_t>(a | (b << 4));
    }
  }
}

void QuantizeQ4_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_1*>(dst);
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    float lo, hi;
    MinMax(x, 32, &lo, &hi);
    const float d = (hi - lo) / 15;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = F32ToF16(d);
    y[i].m = F32ToF16(lo);
    for (int j = 0; j < 16; ++j) {
      const int a = ClampInt(static_cast<int8_t>((x[j] - lo) * id + 0.5f), 0, 15);
      const int b = ClampInt(static_cast<int8_t>((x[j + 16] - lo) * id + 0.5f), 0, 15);
      y[i].qs[j] = static_cast<uint8_t>(a | (b << 4));
    }
  }
}

namespace {

// Q5 packing: the low nibbles into qs, bit 4 of element j into bit j of qh.
template <class Block>
void PackQ5(const int* q, Block* b) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    b->qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
    qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((q[j + 16] >> 4) & 1) << (j + 16);
  }
  std::memcpy(b->qh, &qh, sizeof(qh));
}

}  // namespace

void QuantizeQ5_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_0*>(dst);
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    float amax, max;
    AbsMax(x, 32, &amax, &max);
    const float d = max / -16;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = F32ToF16(d);
    int q[32];
    for (int j = 0; j < 32; ++j) q[j] = ClampInt(static_cast<int8_t>(x[j] * id + 16.5f), 0, 31);
    PackQ5(q, &y[i]);
  }
}

void QuantizeQ5_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_1*>(dst);
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    float lo, hi;
    MinMax(x, 32, &lo, &hi);
    const float d = (hi - lo) / 31;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = F32ToF16(d);
    y[i].m = F32ToF16(lo);
    int q[32];
    for (int j = 0; j < 32; ++j)
      q[j] = ClampInt(static_cast<uint8_t>((x[j] - lo) * id + 0.5f), 0, 31);
    PackQ5(q, &y[i]);
  }
}

void QuantizeIQ4_NL(const float* x, void* dst, int64_t n) {
  static const SortedBook book = Sorted(kIq4nlValues);
  auto* y = static_cast<BlockIQ4_NL*>(dst);
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    uint8_t L[32];
    const float scale = FitCodebookScale(x, book, L);
    y[i].d = F32ToF16(scale);
    // Levels again against the f16-rounded scale the block stores.
    const float d = F16ToF32(y[i].d);
    const float inv = d != 0 ? 1 / d : 0;
    for (int j = 0; j < 32; ++j) L[j] = book.nibble[NearestLevel(book, inv * x[j])];
    PackNibbles(L, y[i].qs);
  }
}

void QuantizeIQ4_XS(const float* x, void* dst, int64_t n) {
  static const SortedBook book = Sorted(kIq4nlValues);
  auto* y = static_cast<BlockIQ4_XS*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float scales[8];
    uint8_t L[32];
    float amax_scale = 0, max_scale = 0;
    for (int g = 0; g < 8; ++g) {
      scales[g] = FitCodebookScale(x + 32 * g, book, L);
      if (std::fabs(scales[g]) > amax_scale) {
        amax_scale = std::fabs(scales[g]);
        max_scale = scales[g];
      }
    }
    // 6-bit group scales (ls - 32 in -32..31) under one f16 super-scale.
    const float d = -max_scale / 32;
    y[i].d = F32ToF16(d);
    const float dd = F16ToF32(y[i].d);
    const float id = dd != 0 ? 1 / dd : 0;
    y[i].scales_h = 0;
    std::memset(y[i].scales_l, 0, sizeof(y[i].scales_l));
    for (int g = 0; g < 8; ++g) {
      const int l = ClampInt(static_cast<int>(std::lround(id * scales[g])), -32, 31);
      const float dl = dd * static_cast<float>(l);
      const float idl = dl != 0 ? 1 / dl : 0;
      for (int j = 0; j < 32; ++j) L[j] = book.nibble[NearestLevel(book, idl * x[32 * g + j])];
      PackNibbles(L, y[i].qs + 16 * g);
      const int u = l + 32;
      y[i].scales_l[g / 2] |= static_cast<uint8_t>((u & 0x0F) << (4 * (g % 2)));
      y[i].scales_h |= static_cast<uint16_t>((u >> 4) << (2 * g));
    }
  }
}

void QuantizeMXFP4(const float* x, void* dst, int64_t n) {
  static const SortedBook book = Sorted(kMxfp4Values);
  auto* y = static_cast<BlockMXFP4*>(dst);
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    float amax, max;
    AbsMax(x, 32, &amax, &max);
    // The smallest power-of-two scale 2^(e-127) that keeps amax within e2m1's 6.
    int e = 0;
    if (amax > 0) e = ClampInt(static_cast<int>(std::ceil(std::log2(amax / 6.0f))) + 127, 1, 254);
    y[i].e = static_cast<uint8_t>(e);
    const float half = std::ldexp(1.0f, e - 128);  // the kMxfp4Values (doubled) unit
    const float inv = amax > 0 ? 1 / half : 0;
    uint8_t L[32];
    for (int j = 0; j < 32; ++j) L[j] = book.nibble[NearestLevel(book, inv * x[j])];
    PackNibbles(L, y[i].qs);
  }
}

}  // namespace colibri::quant::internal
