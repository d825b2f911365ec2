// The legacy (Q4_0..Q5_1), i-quant (IQ4_NL, IQ4_XS, IQ1..IQ3) and MXFP4 formats: dequantized
// values as blocks.h defines them, dot products equal to the dequantized rows' dot product,
// and quantizers that round-trip.
#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <string_view>
#include <vector>

#include "colibri/quant/blocks.h"
#include "colibri/quant/fp16.h"
#include "colibri/quant/quantize.h"
#include "colibri/quant/vec_dot.h"
#include "gtest/gtest.h"
#include "nonk_quant_test_util.h"

namespace colibri::quant {

// Writes f16 `d` as IQ1_M's super-scale: the top nibbles of its four scale words, word 0 lowest.
void SetIq1mSuperScale(BlockIQ1_M* b, uint16_t d) {
  uint16_t sc[4];
  std::memcpy(sc, b->scales, sizeof(sc));
  for (int k = 0; k < 4; ++k)
    sc[k] = static_cast<uint16_t>((sc[k] & 0x0FFF) | (((d >> (4 * k)) & 0xF) << 12));
  std::memcpy(b->scales, sc, sizeof(sc));
}

std::vector<float> Dequant(DType t, const void* blocks, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n));
  DequantizeRow(t, blocks, y.data(), n);
  std::vector<float> ref(static_cast<size_t>(n));
  DequantizeRowReference(t, blocks, ref.data(), n);
  EXPECT_EQ(y, ref);
  return y;
}

std::vector<uint8_t> ArbitraryRow(DType t, int64_t n, std::mt19937& rng) {
  std::vector<uint8_t> row(RowBytes(t, n));
  for (auto& b : row) b = static_cast<uint8_t>(rng());
  const size_t bb = Traits(t).block_bytes;
  for (size_t off = 0; off < row.size(); off += bb) {
    const uint16_t h = F32ToF16(0.002f * static_cast<float>(1 + rng() % 50));
    if (t == DType::kIQ1_M) {
      SetIq1mSuperScale(reinterpret_cast<BlockIQ1_M*>(row.data() + off), h);
    } else if (t == DType::kMXFP4) {
      row[off] = static_cast<uint8_t>(118 + rng() % 16);
    } else if (t == DType::kQ6_K) {
      std::memcpy(row.data() + off + offsetof(BlockQ6_K, d), &h, 2);
    } else {
      std::memcpy(row.data() + off, &h, 2);
      // Q4_1 / Q5_1 m, Q4_K / Q5_K dmin.
      if (t == DType::kQ4_1 || t == DType::kQ5_1 || t == DType::kQ4_K || t == DType::kQ5_K) {
        std::memcpy(row.data() + off + 2, &h, 2);
      }
    }
  }
  return row;
}

namespace {

TEST(LegacyQuantsTest, DequantizedValuesFollowTheFormat) {
  BlockQ4_0 q40{kOne, {}};
  BlockQ4_1 q41{kHalf, 0xBC00 /* -1 */, {}};
  for (int j = 0; j < 16; ++j) {
    q40.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    q41.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  }
  auto y = Dequant(DType::kQ4_0, &q40, 32);
  auto z = Dequant(DType::kQ4_1, &q41, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], static_cast<float>(j - 8));
    EXPECT_EQ(y[j + 16], static_cast<float>(7 - j));
    EXPECT_EQ(z[j], 0.5f * static_cast<float>(j) - 1);
    EXPECT_EQ(z[j + 16], 0.5f * static_cast<float>(15 - j) - 1);
  }
  // Q5: the fifth bit of element j is bit j of qh (elements 16..31: bits 16..31).
  BlockQ5_0 q50{kOne, {}, {}};
  const uint32_t qh = 0x80010002u;  // elements 1, 16 and 31 get +16
  std::memcpy(q50.qh, &qh, 4);
  for (int j = 0; j < 16; ++j) q50.qs[j] = static_cast<uint8_t>(3 | (5 << 4));
  auto w = Dequant(DType::kQ5_0, &q50, 32);
  for (int j = 0; j < 32; ++j) {
    const int q = (j < 16 ? 3 : 5) + (j == 1 || j == 16 || j == 31 ? 16 : 0);
    EXPECT_EQ(w[j], static_cast<float>(q - 16)) << j;
  }
  BlockQ5_1 q51{kOne, kOne, {}, {}};
  std::memcpy(q51.qh, &qh, 4);
  for (int j = 0; j < 16; ++j) q51.qs[j] = static_cast<uint8_t>(3 | (5 << 4));
  auto v = Dequant(DType::kQ5_1, &q51, 32);
  EXPECT_EQ(v[1], 20.f);  // 3 + 16, + m
  EXPECT_EQ(v[0], 4.f);
}

TEST(IQuantsTest, Iq4NlAndXsUseTheCodebook) {
  BlockIQ4_NL nl{0x4000 /* 2 */, {}};
  for (int j = 0; j < 16; ++j) nl.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  auto y = Dequant(DType::kIQ4_NL, &nl, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 2.f * kIq4nlValues[j]);
    EXPECT_EQ(y[j + 16], 2.f * kIq4nlValues[15 - j]);
  }
  BlockIQ4_XS xs{};
  xs.d = kHalf;
  // Group g's 6-bit scale: g + 30 (-> g - 2 after the -32 offset).
  for (int g = 0; g < 8; ++g) {
    const int u = g + 30;
    xs.scales_l[g / 2] |= static_cast<uint8_t>((u & 15) << (4 * (g % 2)));
    xs.scales_h |= static_cast<uint16_t>((u >> 4) << (2 * g));
  }
  for (int k = 0; k < 128; ++k) xs.qs[k] = static_cast<uint8_t>((k % 16) | ((k % 7) << 4));
  auto z = Dequant(DType::kIQ4_XS, &xs, 256);
  for (int g = 0; g < 8; ++g) {
    for (int j = 0; j < 16; ++j) {
      const int k = 16 * g + j;
      EXPECT_EQ(z[32 * g + j], 0.5f * static_cast<float>(g - 2) * kIq4nlValues[k % 16]);
      EXPECT_EQ(z[32 * g + 16 + j], 0.5f * static_cast<float>(g - 2) * kIq4nlValues[k % 7]);
    }
  }
}

TEST(IQuantsTest, Iq2XxsGridSignsAndScale) {
  BlockIQ2_XXS b{};
  b.d = kOne;
  // Group 0: grid points 0, 1, 2, 255; sign fields 1 (-> pattern 129: elements 0 and 7
  // negative), 0, 3 (pattern 3), 0; scale 3.
  const uint32_t a = 0xFF020100u;
  const uint32_t s = (3u << 28) | (1u << 0) | (0u << 7) | (3u << 14);
  std::memcpy(&b.qs[0], &a, 4);
  std::memcpy(&b.qs[2], &s, 4);
  auto y = Dequant(DType::kIQ2_XXS, &b, 256);
  const float db = 1.0f * 3.5f * 0.25f;
  // Grid point 0 is all 8s; point 1 is 8 x7 then 43 (0x2b) in the top byte; point 255 is
  // 0x2b2b2b1908081908.
  const float p0[8] = {8, 8, 8, 8, 8, 8, 8, 8};
  const float p1[8] = {43, 8, 8, 8, 8, 8, 8, 8};
  const float p255[8] = {8, 25, 8, 8, 25, 43, 43, 43};
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(y[j], db * p0[j] * (j == 0 || j == 7 ? -1.f : 1.f)) << j;
    EXPECT_EQ(y[8 + j], db * p1[j]) << j;
    EXPECT_EQ(y[24 + j], db * p255[j]) << j;
  }
  // Point 2 is 0x0808080808081919 (25, 25, then 8s); pattern 3: elements 0 and 1 negative.
  EXPECT_EQ(y[16], -db * 25);
  EXPECT_EQ(y[17], -db * 25);
  EXPECT_EQ(y[18], db * 8);
  for (int j = 32; j < 256; ++j)
    EXPECT_EQ(y[j], db / 3.5f * 0.5f * 8) << j;  // all-zero groups: scale 0.5
}

TEST(IQuantsTest, Mxfp4IsE2m1TimesAPowerOfTwo) {
  BlockMXFP4 b{127, {}};  // scale 2^0
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  auto y = Dequant(DType::kMXFP4, &b, 32);
  const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, 0, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], e2m1[j]);
    EXPECT_EQ(y[j + 16], e2m1[15 - j]);
  }
  b.e = 130;  // 2^3
  EXPECT_EQ(Dequant(DType::kMXFP4, &b, 32)[7], 48.f);
  b.e = 0;  // 2^-127, a denormal float
  EXPECT_EQ(Dequant(DType::kMXFP4, &b, 32)[1], std::ldexp(0.5f, -127));
}

// Random blocks of `t`: quantized from normal data, or (import-only types) random bytes under a
// plausible f16 super-scale.
std::vector<uint8_t> RandomRow(DType t, int64_t n, std::mt19937& rng) {
  std::vector<uint8_t> row(RowBytes(t, n));
  if (HasQuantizer(t)) {
    std::normal_distribution<float> nd(0, 1);
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = nd(rng);
    QuantizeRow(t, x.data(), row.data(), n);
    return row;
  }
  for (auto& b : row) b = static_cast<uint8_t>(rng());
  const size_t bb = Traits(t).block_bytes;
  for (size_t i = 0; i < row.size() / bb; ++i) {
    const uint16_t d = F32ToF16(0.01f + 0.001f * static_cast<float>(i));
    if (t == DType::kIQ1_M) {
      SetIq1mSuperScale(reinterpret_cast<BlockIQ1_M*>(row.data() + i * bb), d);
    } else {
      std::memcpy(row.data() + i * bb, &d, sizeof(d));  // d leads every other such block
    }
  }
  return row;
}

TEST(NonKQuantsTest, VecDotEqualsTheDequantizedDotProduct) {
  std::mt19937 rng(11);
  const int64_t n = 1024;
  for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL,
                  DType::kIQ4_XS, DType::kIQ2_XXS, DType::kIQ2_XS, DType::kIQ2_S, DType::kIQ3_XXS,
                  DType::kIQ3_S, DType::kIQ1_S, DType::kIQ1_M, DType::kMXFP4}) {
    const DType at = Traits(t).vec_dot_type;
    std::vector<uint8_t> w = RandomRow(t, n, rng);
    std::normal_distribution<float> nd(0, 1);
    std::vector<float> x(n);
    for (auto& v : x) v = nd(rng);
    std::vector<uint8_t> act(RowBytes(at, n));
    QuantizeActivations(at, x.data(), act.data(), n);
    const std::vector<float> wf = Dequant(t, w.data(), n);
    std::vector<float> af(n);
    DequantizeRow(at, act.data(), af.data(), n);
    double ref = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
      ref += static_cast<double>(wf[i]) * af[i];
      mag += std::fabs(static_cast<double>(wf[i]) * af[i]);
    }
    const float got = VecDotReference(t, w.data(), act.data(), n);
    // Q8_1 carries d * sum(q) rounded to f16 (GGML's format), so the min term is that close.
    const double tol = at == DType::kQ8_1 ? 1e-3 * mag : 1e-5 * mag;
    EXPECT_NEAR(got, ref, tol) << DTypeName(t);
    // Every kernel set this CPU has (its SIMD i-quant and legacy kernels included) gives the
    // reference's exact bits, in VecDot and MatVec alike.
    for (std::string_view isa : SupportedIsas()) {
      ASSERT_TRUE(SetKernelIsaCap(isa));
      EXPECT_EQ(VecDot(t, w.data(), act.data(), n), got) << DTypeName(t) << " " << isa;
      std::vector<float> rows(3);
      std::vector<uint8_t> three(3 * w.size());
      for (int r = 0; r < 3; ++r) std::memcpy(three.data() + r * w.size(), w.data(), w.size());
      MatVec(t, three.data(), w.size(), 3, act.data(), n, rows.data());
      for (float r : rows) EXPECT_EQ(r, got) << DTypeName(t) << " " << isa;
    }
    ForceScalarKernels(false);
  }
}

TEST(NonKQuantsTest, SimdDotProductsAreTheScalarBitsOnArbitraryBlocks) {
  std::mt19937 rng(2024);
  for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL,
                  DType::kIQ4_XS, DType::kIQ2_XXS, DType::kIQ2_XS, DType::kIQ2_S, DType::kIQ3_XXS,
                  DType::kIQ3_S, DType::kIQ1_S, DType::kIQ1_M, DType::kMXFP4}) {
    for (int rep = 0; rep < 4; ++rep) {
      const int64_t n = 256 * (1 + rep * 5);
      const DType at = Traits(t).vec_dot_type;
      const std::vector<uint8_t> w = ArbitraryRow(t, n, rng);
      std::normal_distribution<float> nd(0, rep + 1.f);
      std::vector<float> x(static_cast<size_t>(n));
      for (auto& v : x) v = nd(rng);
      std::vector<uint8_t> act(RowBytes(at, n));
      QuantizeActivations(at, x.data(), act.data(), n);
      const float ref = VecDotReference(t, w.data(), act.data(), n);
      ASSERT_TRUE(std::isfinite(ref)) << DTypeName(t);
      for (std::string_view isa : SupportedIsas()) {
        ASSERT_TRUE(SetKernelIsaCap(isa));
        EXPECT_EQ(VecDot(t, w.data(), act.data(), n), ref)
            << DTypeName(t) << " n=" << n << " " << isa;
      }
      ASSERT_TRUE(SetKernelIsaCap("avx512"));
    }
  }
}

TEST(NonKQuantsTest, Q8_1CarriesTheScaledSum) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = 0.08f * static_cast<float>(j) - 1.3f;  // |x| <= 1.3
  BlockQ8_1 b;
  QuantizeActivations(DType::kQ8_1, x.data(), &b, 32);
  int sum = 0;
  for (int j = 0; j < 32; ++j) sum += b.qs[j];
  EXPECT_EQ(b.s, F32ToF16((1.3f / 127.f) * static_cast<float>(sum)));
  EXPECT_EQ(b.d, F32ToF16(1.3f / 127.f));
}

TEST(NonKQuantsTest, QuantizersRoundTripWithinTheirPrecision) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0, 1);
  const int64_t n = 4096;
  std::vector<float> x(n);
  for (auto& v : x) v = nd(rng);
  auto rmse = [&](DType t) {
    std::vector<uint8_t> q(RowBytes(t, n));
    QuantizeRow(t, x.data(), q.data(), n);
    std::vector<float> y = Dequant(t, q.data(), n);
    double e = 0;
    for (int64_t i = 0; i < n; ++i) e += (y[i] - x[i]) * (y[i] - x[i]);
    return std::sqrt(e / static_cast<double>(n));
  };
  const double q40 = rmse(DType::kQ4_0), q41 = rmse(DType::kQ4_1), q50 = rmse(DType::kQ5_0),
               q51 = rmse(DType::kQ5_1);
  const double nl = rmse(DType::kIQ4_NL), xs = rmse(DType::kIQ4_XS), mx = rmse(DType::kMXFP4);
  // 4-bit grids on N(0,1) data: about 0.1 of the signal; 5-bit about half that.
  EXPECT_LT(q40, 0.13);
  EXPECT_LT(q41, 0.12);
  EXPECT_LT(q50, 0.065);
  EXPECT_LT(q51, 0.06);
  EXPECT_LT(nl, q40);  // the non-linear codebook fits normal data better than the uniform grid
  EXPECT_LT(xs, 0.12);
  EXPECT_LT(mx, 0.2);
  EXPECT_GT(q40, q50);
  for (DType t : {DType::kIQ2_XXS, DType::kIQ2_XS, DType::kIQ2_S, DType::kIQ3_XXS, DType::kIQ3_S,
                  DType::kIQ1_S, DType::kIQ1_M}) {
    EXPECT_FALSE(HasQuantizer(t)) << DTypeName(t);
  }
}

TEST(NonKQuantsTest, TypesHaveGgmlIdsNamesAndSizes) {
  struct Want {
    DType t;
    uint32_t id;
    const char* name;
    size_t bytes;
    int64_t elems;
    DType act;
  };
  for (const Want& w : {Want{DType::kQ4_0, 2, "q4_0", 18, 32, DType::kQ8_0},
                        Want{DType::kQ4_1, 3, "q4_1", 20, 32, DType::kQ8_1},
                        Want{DType::kQ5_0, 6, "q5_0", 22, 32, DType::kQ8_0},
                        Want{DType::kQ5_1, 7, "q5_1", 24, 32, DType::kQ8_1},
                        Want{DType::kIQ2_XXS, 16, "iq2_xxs", 66, 256, DType::kQ8_K},
                        Want{DType::kIQ2_XS, 17, "iq2_xs", 74, 256, DType::kQ8_K},
                        Want{DType::kIQ3_XXS, 18, "iq3_xxs", 98, 256, DType::kQ8_K},
                        Want{DType::kIQ1_S, 19, "iq1_s", 50, 256, DType::kQ8_K},
                        Want{DType::kIQ3_S, 21, "iq3_s", 110, 256, DType::kQ8_K},
                        Want{DType::kIQ2_S, 22, "iq2_s", 82, 256, DType::kQ8_K},
                        Want{DType::kIQ1_M, 29, "iq1_m", 56, 256, DType::kQ8_K},
                        Want{DType::kIQ4_NL, 20, "iq4_nl", 18, 32, DType::kQ8_0},
                        Want{DType::kIQ4_XS, 23, "iq4_xs", 136, 256, DType::kQ8_K},
                        Want{DType::kMXFP4, 39, "mxfp4", 17, 32, DType::kQ8_0}}) {
    EXPECT_EQ(static_cast<uint32_t>(w.t), w.id);
    EXPECT_TRUE(IsKnownDType(w.id));
    EXPECT_EQ(DTypeName(w.t), w.name);
    EXPECT_EQ(Traits(w.t).block_bytes, w.bytes);
    EXPECT_EQ(Traits(w.t).block_elems, w.elems);
    EXPECT_EQ(Traits(w.t).vec_dot_type, w.act);
    EXPECT_EQ(*ParseDType(w.name), w.t);
  }
}

}  // namespace
}  // namespace colibri::quant
