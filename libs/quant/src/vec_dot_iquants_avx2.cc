// AVX2 dot products for the codebook formats IQ4_NL, IQ4_XS and MXFP4: each byte of nibbles is
// looked up in the 16-entry int8 codebook with pshufb (so 32 weights become 32 int8 values in
// element order), multiplied with the int8 activations exactly (sign trick + maddubs + madd:
// |codebook| <= 127 and activations are never -128, so no int16 pair saturates), and the exact
// integer sum of each group goes through the same float expression as iquants.cc's reference:
// the results are bit-identical to it. Built with -mavx2 -mfma -mf16c; see kernels.h for what
// this file may include.
#include "kernels.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <string.h>

#include "avx2_helpers.h"
#include "colibri/quant/blocks.h"

namespace colibri::quant::internal {
namespace {

float DotIQ4_NLAvx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_NL*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  const __m256i book = BroadcastTable(kIq4nlValues);
  float sum = 0;
  for (int64_t i = 0; i < n / 32; ++i) {
    const float d = HalfToFloat(y[i].d) * HalfToFloat(x[i].d);
    sum += d * static_cast<float>(DotInt8(LookupNibbles(book, x[i].qs), y[i].qs));
  }
  return sum;
}

float DotIQ4_XSAvx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_XS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i book = BroadcastTable(kIq4nlValues);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d4d8 = HalfToFloat(x[i].d) * y[i].d;
    for (int g = 0; g < kQK_K / 32; ++g) {
      const int low = (x[i].scales_l[g / 2] >> (4 * (g % 2))) & 0x0F;
      const int high = (x[i].scales_h >> (2 * g)) & 3;
      const int ls = (low | (high << 4)) - 32;
      const int isum = DotInt8(LookupNibbles(book, x[i].qs + 16 * g), y[i].qs + 32 * g);
      sum += d4d8 * static_cast<float>(ls) * static_cast<float>(isum);
    }
  }
  return sum;
}

float DotMXFP4Avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockMXFP4*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  const __m256i book = BroadcastTable(kMxfp4Values);
  float sum = 0;
  for (int64_t i = 0; i < n / 32; ++i) {
    const float d = E8M0HalfScale(x[i].e) * HalfToFloat(y[i].d);
    sum += d * static_cast<float>(DotInt8(LookupNibbles(book, x[i].qs), y[i].qs));
  }
  return sum;
}

}  // namespace

bool FillAvx2IQuantVecDot(KernelTable* table) {
  table->vec_dot[20] = DotIQ4_NLAvx2;
  table->vec_dot[23] = DotIQ4_XSAvx2;
  table->vec_dot[39] = DotMXFP4Avx2;
  return true;
}

}  // namespace colibri::quant::internal

#else  // not x86

namespace colibri::quant::internal {
bool FillAvx2IQuantVecDot(KernelTable*) { return false; }
}  // namespace colibri::quant::internal

#endif
