// Internal, for the AVX-512 kernel files only (vec_dot_avx512.cc, vec_dot_avx512_vnni.cc): the
// AVX-512 building blocks they share, on top of avx2_helpers.h. Integer sums are exact.
//
// In an unnamed namespace on purpose, like avx2_helpers.h: every file that includes this gets
// its own copy compiled with its own flags (kernels.h explains why that matters). Include it
// only from a file compiled with -mavx512f -mavx512bw -mavx512vl (and the AVX2 flags); the
// VNNI helpers exist only where -mavx512vnni is also given.
#pragma once

#include <immintrin.h>
#include <stdint.h>

#include "avx2_helpers.h"

namespace colibri::quant::internal {
namespace {

// (GCC 12's _mm512_reduce_add_ps trips -Wmaybe-uninitialized inside its own header.)
inline float HorizontalSum(__m512 v) {
  const __m512 folded = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4e));  // 256-bit halves
  return HorizontalSum(_mm512_castps512_ps256(folded));
}

// vpermw indices broadcasting int16 lane g_lo to the low 16 int16 lanes and g_hi to the high 16.
inline __m512i PairIndex(short g_lo, short g_hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(g_lo)),
                            _mm256_set1_epi16(g_hi), 1);
}

// Ask for the bytes `ahead` past p (this row's later blocks or the next row's first) so memory
// latency overlaps the arithmetic. Never faults.
inline void PrefetchAhead(const void* p, int ahead) {
  _mm_prefetch(static_cast<const char*>(p) + ahead, _MM_HINT_T0);
}

#if defined(__AVX512VNNI__)
// acc + the 8 sums of 4 products of unsigned bytes u with signed bytes s (vpdpbusd): exact, no
// intermediate saturation.
inline __m256i DotBytes(__m256i acc, __m256i u, __m256i s) {
  return _mm256_dpbusd_epi32(acc, u, s);
}

#endif

}  // namespace
}  // namespace colibri::quant::internal
