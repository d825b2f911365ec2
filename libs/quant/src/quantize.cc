// Reference quantizers. Each reproduces GGML's reference algorithm for its type (the searches
// llama-quantize runs without an importance matrix), so the float operations are written in
// the same order GGML evaluates them: changing an expression's association changes which
// candidate a search keeps, and with it the bytes. This file is built with
// -ffp-contract=off so no multiply-add is fused behind our back.
#include "colibri/quant/quantize.h"

#include <cassert>
#include <cmath>
#include <cstring>

#include "colibri/quant/blocks.h"
#include "colibri/quant/fp16.h"
#include "kernels.h"

namespace colibri::quant {
namespace {

// Groups whose largest magnitude is below this are stored as zeros.
constexpr float kGroupMaxEps = 1e-15f;

// Round half to even for |v| < 2^22: adding 1.5 * 2^23 leaves the float with a unit of last
// place of exactly 1, so the hardware's rounding does the work. Defined (if meaningless) for
// any input, unlike a float->int cast.
inline int NearestInt(float v) {
  const float shifted = v + 12582912.0f;
  uint32_t bits;
  std::memcpy(&bits, &shifted, sizeof(bits));
  return static_cast<int>(bits & 0x007fffffu) - 0x00400000;
}

inline int Clamp(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Fits x[i] ~ scale * L[i] - min_out with L[i] in [0, nmax] and min_out >= 0, minimizing the
// w-weighted squared (or absolute, use_mad) error. Starts from the plain min/max grid, then
// tries nstep+1 stretched grids (nmax + rmin + rdelta * k levels over the range), refitting
// scale and min by weighted least squares for each; keeps the best. L holds the chosen levels.
float FitScaleAndMin(int n, int nmax, const float* x, const float* w, uint8_t* L, float* min_out,
                     uint8_t* L_trial, float rmin, float rdelta, int nstep, bool use_mad) {
  float lo = x[0];
  float hi = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < lo) lo = x[i];
    if (x[i] > hi) hi = x[i];
    const float wi = w[i];
    sum_w += wi;
    sum_x += wi * x[i];
  }
  if (lo > 0) lo = 0;
  if (hi == lo) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *min_out = -lo;
    return 0.f;
  }
  float iscale = nmax / (hi - lo);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = NearestInt(iscale * (x[i] - lo));
    L[i] = static_cast<uint8_t>(Clamp(l, 0, nmax));
    float diff = scale * L[i] + lo - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += w[i] * diff;
  }
  if (nstep < 1) {
    *min_out = -lo;
    return scale;
  }
  for (int step = 0; step <= nstep; ++step) {
    iscale = (rmin + rdelta * step + nmax) / (hi - lo);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = Clamp(NearestInt(iscale * (x[i] - lo)), 0, nmax);
      L_trial[i] = static_cast<uint8_t>(l);
      const float wi = w[i];
      sum_l += wi * l;
      sum_l2 += wi * l * l;
      sum_xl += wi * l * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det > 0) {
      float trial_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
      float trial_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
      if (trial_min > 0) {
        trial_min = 0;
        trial_scale = sum_xl / sum_l2;
      }
      float error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = trial_scale * L_trial[i] + trial_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        error += w[i] * diff;
      }
      if (error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = L_trial[i];
        best_error = error;
        scale = trial_scale;
        lo = trial_min;
      }
    }
  }
  *min_out = -lo;
  return scale;
}

// Symmetric fit x[i] ~ scale * (L[i] - nmax), L[i] - nmax in [-nmax, nmax-1], weights x^2:
// scans 19 grids around nmax levels and keeps the one with the best weighted correlation.
// (GGML's make_qx_quants with rmse_type 1 and no importance weights.)
float FitSymmetricScale(int n, int nmax, const float* x, int8_t* L) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = Clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int step = -9; step <= 9; ++step) {
    if (step == 0) continue;
    iscale = -(nmax + 0.1f * step) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = Clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        L[i] = static_cast<int8_t>(nmax + Clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Symmetric fit for 3-bit groups: start from the absmax grid, then move single levels while
// that improves the weighted (x^2) correlation, up to 5 sweeps. L returns levels + nmax.
// (GGML's make_q3_quants with do_rmse.)
float FitQ3Scale(int n, int nmax, const float* x, int8_t* L) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  const float iscale = -nmax / max;
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = Clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  for (int sweep = 0; sweep < 5; ++sweep) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * L[i];
      if (slx > 0) {
        float sl2 = suml2 - w * L[i] * L[i];
        const int new_l = Clamp(NearestInt(x[i] * sl2 / slx), -nmax, nmax - 1);
        if (new_l != L[i]) {
          slx += w * x[i] * new_l;
          sl2 += w * new_l * new_l;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++changed;
          }
        }
      }
    }
    if (!changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return sumlx / suml2;
}

// 6-bit scale/min pair j of a Q4_K/Q5_K block (see blocks.h).
inline void UnpackScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Packs 8 six-bit scales and mins into the 12-byte Q4_K/Q5_K layout.
void PackScalesMinsK4(const float* scales, const float* mins, float max_scale, float max_min,
                      uint8_t* out) {
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < kQK_K / 32; ++j) {
    // The uint8_t conversion happens before the clamp, as in GGML.
    uint8_t ls = static_cast<uint8_t>(NearestInt(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(NearestInt(inv_min * mins[j]));
    if (ls > 63) ls = 63;
    if (lm > 63) lm = 63;
    if (j < 4) {
      out[j] = ls;
      out[j + 4] = lm;
    } else {
      out[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
      out[j - 4] |= ((ls >> 4) << 6);
      out[j] |= ((lm >> 4) << 6);
    }
  }
}

// Scale and min search for the 8 groups of 32 of a Q4_K/Q5_K super-block. Weights are
// rms(group) + |x|. Returns the per-group results and the levels in L.
void SearchGroupsOf32(const float* x, int nmax, float rmin, int nstep, uint8_t* L, float* scales,
                      float* mins, float* max_scale, float* max_min) {
  float weights[32];
  uint8_t L_trial[32];
  *max_scale = 0;
  *max_min = 0;
  for (int j = 0; j < kQK_K / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = FitScaleAndMin(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], L_trial, rmin,
                               0.1f, nstep, false);
    if (scales[j] > *max_scale) *max_scale = scales[j];
    if (mins[j] > *max_min) *max_min = mins[j];
  }
}

// Requantizes each group of 32 against its stored (rounded) scale and min. Groups whose
// stored scale is zero keep the levels of the search, as GGML does.
void RequantizeGroupsOf32(const float* x, int nmax, uint16_t d16, uint16_t dmin16,
                          const uint8_t* packed, uint8_t* L) {
  for (int j = 0; j < kQK_K / 32; ++j) {
    uint8_t sc, m;
    UnpackScaleMinK4(j, packed, &sc, &m);
    const float d = F16ToF32(d16) * sc;
    if (!d) continue;
    const float dm = F16ToF32(dmin16) * m;
    for (int ii = 0; ii < 32; ++ii) {
      L[32 * j + ii] = static_cast<uint8_t>(Clamp(NearestInt((x[32 * j + ii] + dm) / d), 0, nmax));
    }
  }
}

void QuantizeQ8_0(const float* x, BlockQ8_0* y, int64_t n) {
  const int64_t nb = n / kQK8_0;
  for (int64_t i = 0; i < nb; ++i, x += kQK8_0) {
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) {
      const float ax = std::fabs(x[j]);
      amax = amax > ax ? amax : ax;
    }
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = F32ToF16(d);
    for (int j = 0; j < kQK8_0; ++j) {
      // Round half away from zero (roundf), as the reference does; |x * id| <= 127 for finite
      // input, the guard only keeps non-finite input defined.
      const float r = std::round(x[j] * id);
      y[i].qs[j] = static_cast<int8_t>(r >= -128.f && r <= 127.f ? static_cast<int>(r) : 0);
    }
  }
}

void QuantizeQ2_K(const float* x, BlockQ2_K* y, int64_t n) {
  const int64_t nb = n / kQK_K;
  constexpr float kQ4Scale = 15.f;
  uint8_t L[kQK_K];
  uint8_t L_trial[16];
  float weights[16];
  float mins[kQK_K / 16];
  float scales[kQK_K / 16];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float max_scale = 0;
    float max_min = 0;
    for (int j = 0; j < kQK_K / 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = FitScaleAndMin(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], L_trial, -0.5f,
                                 0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
      const float iscale = kQ4Scale / max_scale;
      for (int j = 0; j < kQK_K / 16; ++j) {
        y[i].scales[j] = static_cast<uint8_t>(NearestInt(iscale * scales[j]));
      }
      y[i].d = F32ToF16(max_scale / kQ4Scale);
    } else {
      for (int j = 0; j < kQK_K / 16; ++j) y[i].scales[j] = 0;
      y[i].d = F32ToF16(0.f);
    }
    if (max_min > 0) {
      const float iscale = kQ4Scale / max_min;
      for (int j = 0; j < kQK_K / 16; ++j) {
        y[i].scales[j] |= static_cast<uint8_t>(NearestInt(iscale * mins[j]) << 4);
      }
      y[i].dmin = F32ToF16(max_min / kQ4Scale);
    } else {
      y[i].dmin = F32ToF16(0.f);
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = F16ToF32(y[i].d) * (y[i].scales[j] & 0xF);
      if (!d) continue;
      const float dm = F16ToF32(y[i].dmin) * (y[i].scales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii) {
        L[16 * j + ii] = static_cast<uint8_t>(Clamp(NearestInt((x[16 * j + ii] + dm) / d), 0, 3));
      }
    }
    for (int j = 0; j < kQK_K; j += 128) {
      for (int l = 0; l < 32; ++l) {
        y[i].qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) |
                                                  (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
      }
    }
  }
}

void QuantizeQ3_K(const float* x, BlockQ3_K* y, int64_t n) {
  const int64_t nb = n / kQK_K;
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float max_scale = 0;
    float amax = 0;
    for (int j = 0; j < kQK_K / 16; ++j) {
      scales[j] = FitQ3Scale(16, 4, x + 16 * j, L + 16 * j);
      const float scale = std::fabs(scales[j]);
      if (scale > amax) {
        amax = scale;
        max_scale = scales[j];
      }
    }
    std::memset(y[i].scales, 0, sizeof(y[i].scales));
    if (max_scale) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < kQK_K / 16; ++j) {
        int8_t l = static_cast<int8_t>(NearestInt(iscale * scales[j]));
        l = static_cast<int8_t>(Clamp(l, -32, 31) + 32);
        if (j < 8) {
          y[i].scales[j] = l & 0xF;
        } else {
          y[i].scales[j - 8] |= ((l & 0xF) << 4);
        }
        l >>= 4;
        y[i].scales[j % 4 + 8] |= (l << (2 * (j / 4)));
      }
      y[i].d = F32ToF16(1 / iscale);
    } else {
      y[i].d = F32ToF16(0.f);
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sc = j < 8 ? y[i].scales[j] & 0xF : y[i].scales[j - 8] >> 4;
      sc = (sc | (((y[i].scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
      const float d = F16ToF32(y[i].d) * sc;
      if (!d) continue;
      for (int ii = 0; ii < 16; ++ii) {
        L[16 * j + ii] = static_cast<int8_t>(Clamp(NearestInt(x[16 * j + ii] / d), -4, 3) + 4);
      }
    }
    std::memset(y[i].hmask, 0, sizeof(y[i].hmask));
    // The high bit of element j goes to bit j / 32 of hmask[j % 32].
    for (int j = 0; j < kQK_K; ++j) {
      if (L[j] > 3) {
        y[i].hmask[j % 32] |= static_cast<uint8_t>(1u << (j / 32));
        L[j] = static_cast<int8_t>(L[j] - 4);
      }
    }
    for (int j = 0; j < kQK_K; j += 128) {
      for (int l = 0; l < 32; ++l) {
        y[i].qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) |
                                                  (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
      }
    }
  }
}

void QuantizeQ4_K(const float* x, BlockQ4_K* y, int64_t n) {
  const int64_t nb = n / kQK_K;
  uint8_t L[kQK_K];
  float mins[kQK_K / 32];
  float scales[kQK_K / 32];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float max_scale, max_min;
    SearchGroupsOf32(x, 15, -1.f, 20, L, scales, mins, &max_scale, &max_min);
    std::memset(y[i].scales, 0, sizeof(y[i].scales));
    PackScalesMinsK4(scales, mins, max_scale, max_min, y[i].scales);
    y[i].d = F32ToF16(max_scale / 63.f);
    y[i].dmin = F32ToF16(max_min / 63.f);
    RequantizeGroupsOf32(x, 15, y[i].d, y[i].dmin, y[i].scales, L);
    uint8_t* q = y[i].qs;
    for (int j = 0; j < kQK_K; j += 64, q += 32) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    }
  }
}

void QuantizeQ5_K(const float* x, BlockQ5_K* y, int64_t n) {
  const int64_t nb = n / kQK_K;
  uint8_t L[kQK_K];
  float mins[kQK_K / 32];
  float scales[kQK_K / 32];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float max_scale, max_min;
    SearchGroupsOf32(x, 31, -0.5f, 15, L, scales, mins, &max_scale, &max_min);
    std::memset(y[i].scales, 0, sizeof(y[i].scales));
    PackScalesMinsK4(scales, mins, max_scale, max_min, y[i].scales);
    y[i].d = F32ToF16(max_scale / 63.f);
    y[i].dmin = F32ToF16(max_min / 63.f);
    RequantizeGroupsOf32(x, 31, y[i].d, y[i].dmin, y[i].scales, L);
    uint8_t* qh = y[i].qh;
    uint8_t* ql = y[i].qs;
    std::memset(qh, 0, kQK_K / 8);
    uint8_t m1 = 1, m2 = 2;
    for (int h = 0; h < kQK_K; h += 64, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[h + j];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        int l2 = L[h + j + 32];
        if (l2 > 15) {
          l2 -= 16;
          qh[j] |= m2;
        }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 = static_cast<uint8_t>(m1 << 2);
      m2 = static_cast<uint8_t>(m2 << 2);
    }
  }
}

void QuantizeQ6_K(const float* x, BlockQ6_K* y, int64_t n) {
  const int64_t nb = n / kQK_K;
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float max_scale = 0;
    float max_abs_scale = 0;
    for (int g = 0; g < kQK_K / 16; ++g) {
      const float scale = FitSymmetricScale(16, 32, x + 16 * g, L + 16 * g);
      scales[g] = scale;
      const float abs_scale = std::fabs(scale);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scale;
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof(BlockQ6_K));
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[i].d = F32ToF16(1 / iscale);
    for (int g = 0; g < kQK_K / 16; ++g) {
      const int s = NearestInt(iscale * scales[g]);
      y[i].scales[g] = static_cast<int8_t>(s < 127 ? s : 127);
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = F16ToF32(y[i].d) * y[i].scales[j];
      if (!d) continue;
      for (int ii = 0; ii < 16; ++ii) {
        L[16 * j + ii] = static_cast<int8_t>(Clamp(NearestInt(x[16 * j + ii] / d), -32, 31) + 32);
      }
    }
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l] & 0xF;
        const uint8_t q2 = L[j + l + 32] & 0xF;
        const uint8_t q3 = L[j + l + 64] & 0xF;
        const uint8_t q4 = L[j + l + 96] & 0xF;
        ql[l] = static_cast<uint8_t>(q1 | (q3 << 4));
        ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
        qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                     ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace

namespace internal {

void QuantizeQ8_K(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  const int64_t nb = n / kQK_K;
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float max = 0;
    float amax = 0;
    for (int j = 0; j < kQK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (!amax) {
      y[i].d = 0;
      std::memset(y[i].qs, 0, sizeof(y[i].qs));
      std::memset(y[i].bsums, 0, sizeof(y[i].bsums));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQK_K; ++j) {
      const int v = NearestInt(iscale * x[j]);
      y[i].qs[j] = static_cast<int8_t>(v < 127 ? v : 127);
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

void QuantizeQ8_0Activations(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  const int64_t nb = n / kQK8_0;
  for (int64_t i = 0; i < nb; ++i, x += kQK8_0) {
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) amax = ax;
    }
    const float d = amax / 127.f;
    y[i].d = F32ToF16(d);
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    for (int j = 0; j < kQK8_0; ++j) y[i].qs[j] = static_cast<int8_t>(NearestInt(x[j] * id));
  }
}

void QuantizeQ8_1Activations(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  const int64_t nb = n / 32;
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) amax = ax;
    }
    const float d = amax / 127.f;
    y[i].d = F32ToF16(d);
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      y[i].qs[j] = static_cast<int8_t>(NearestInt(x[j] * id));
      sum += y[i].qs[j];
    }
    y[i].s = F32ToF16(d * static_cast<float>(sum));
  }
}

}  // namespace internal

void QuantizeRow(DType type, const float* src, void* dst, int64_t n) {
  assert(n % Traits(type).block_elems == 0);
  switch (type) {
    case DType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case DType::kF16: {
      auto* out = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) out[i] = F32ToF16(src[i]);
      return;
    }
    case DType::kBF16: {
      auto* out = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) out[i] = F32ToBF16(src[i]);
      return;
    }
    case DType::kQ8_0: QuantizeQ8_0(src, static_cast<BlockQ8_0*>(dst), n); return;
    case DType::kQ2_K: QuantizeQ2_K(src, static_cast<BlockQ2_K*>(dst), n); return;
    case DType::kQ3_K: QuantizeQ3_K(src, static_cast<BlockQ3_K*>(dst), n); return;
    case DType::kQ4_K: QuantizeQ4_K(src, static_cast<BlockQ4_K*>(dst), n); return;
    case DType::kQ5_K: QuantizeQ5_K(src, static_cast<BlockQ5_K*>(dst), n); return;
    case DType::kQ6_K: QuantizeQ6_K(src, static_cast<BlockQ6_K*>(dst), n); return;
    case DType::kQ8_K: internal::QuantizeQ8_K(src, dst, n); return;
    case DType::kQ4_0: internal::QuantizeQ4_0(src, dst, n); return;
    case DType::kQ4_1: internal::QuantizeQ4_1(src, dst, n); return;
    case DType::kQ5_0: internal::QuantizeQ5_0(src, dst, n); return;
    case DType::kQ5_1: internal::QuantizeQ5_1(src, dst, n); return;
    case DType::kQ8_1: internal::QuantizeQ8_1Activations(src, dst, n); return;
    case DType::kIQ4_NL: internal::QuantizeIQ4_NL(src, dst, n); return;
    case DType::kIQ4_XS: internal::QuantizeIQ4_XS(src, dst, n); return;
    case DType::kMXFP4: internal::QuantizeMXFP4(src, dst, n); return;
    default:
      break;  // the codebook i-quants have no quantizer (HasQuantizer): import them from GGUF
  }
  assert(false && "QuantizeRow: no quantizer for this DType");
}

bool HasQuantizer(DType type) {
  switch (type) {
    case DType::kIQ2_XXS:
    case DType::kIQ2_XS:
    case DType::kIQ2_S:
    case DType::kIQ3_XXS:
    case DType::kIQ3_S:
    case DType::kIQ1_S:
    case DType::kIQ1_M: return false;
    default: return IsKnownDType(static_cast<uint32_t>(type));
  }
}

}  // namespace colibri::quant
