#include "colibri/quant/quantize.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "colibri/quant/blocks.h"
#include "colibri/quant/dtype.h"
#include "colibri/quant/fp16.h"
#include "colibri/quant/vec_dot.h"
#include "gtest/gtest.h"

namespace colibri::quant {
namespace {

constexpr DType kAllTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,
                               DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K,
                               DType::kQ6_K, DType::kQ8_K};

// Gaussian values with a few large outliers, like trained weights.
std::vector<float> RandomRow(int64_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) {
    v = normal(rng);
    if (unit(rng) < 0.002f) v *= 8;
  }
  return x;
}

double Rmse(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
  return std::sqrt(s / static_cast<double>(a.size()));
}

std::vector<float> RoundTrip(DType type, const std::vector<float>& x) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> q(RowBytes(type, n));
  QuantizeRow(type, x.data(), q.data(), n);
  std::vector<float> y(x.size());
  DequantizeRow(type, q.data(), y.data(), n);
  return y;
}

TEST(QuantizeTest, RoundTripErrorPerType) {
  const std::vector<float> x = RandomRow(16 * 256, 1);
  // RMSE bounds for unit Gaussians with 0.2% outliers: about 1.25x what these quantizers
  // measure (q8_0 0.0071, q8_k 0.0144, q6_k 0.0222, q5_k 0.0419, q4_k 0.0840, q3_k 0.181,
  // q2_k 0.345), so a regression in a search shows up here before the oracle test.
  const struct {
    DType type;
    double max_rmse;
  } kBounds[] = {
      {DType::kF32, 0.0},     {DType::kF16, 4e-4},    {DType::kBF16, 3e-3},   {DType::kQ8_0, 9e-3},
      {DType::kQ8_K, 1.8e-2}, {DType::kQ6_K, 2.8e-2}, {DType::kQ5_K, 5.2e-2}, {DType::kQ4_K, 0.105},
      {DType::kQ3_K, 0.23},   {DType::kQ2_K, 0.43},
  };
  for (const auto& b : kBounds) {
    const double rmse = Rmse(x, RoundTrip(b.type, x));
    EXPECT_LE(rmse, b.max_rmse) << DTypeName(b.type);
  }
}

TEST(QuantizeTest, ErrorDecreasesWithBits) {
  const std::vector<float> x = RandomRow(64 * 256, 2);
  const DType kOrder[] = {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,
                          DType::kQ5_K, DType::kQ6_K, DType::kQ8_0};
  double previous = 1e9;
  for (DType t : kOrder) {
    const double rmse = Rmse(x, RoundTrip(t, x));
    EXPECT_LT(rmse, previous * 0.75) << DTypeName(t);
    previous = rmse;
  }
}

TEST(QuantizeTest, ZerosStayZeros) {
  const std::vector<float> zeros(512, 0.0f);
  for (DType t : kAllTypes) {
    const std::vector<float> y = RoundTrip(t, zeros);
    for (float v : y) ASSERT_EQ(v, 0.0f) << DTypeName(t);
  }
}

TEST(QuantizeTest, ConstantAndOneSidedRowsAreFinite) {
  for (float c : {1.0f, -3.0f, 1e-20f, 1000.0f}) {
    std::vector<float> x(512, c);
    x[7] = 2 * c;
    for (DType t : kAllTypes) {
      const std::vector<float> y = RoundTrip(t, x);
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_TRUE(std::isfinite(y[i])) << DTypeName(t) << " c=" << c;
        // (1e-20 is below the f16 scales' range: those rows may flush to zero.)
        if (std::fabs(c) >= 1) {
          ASSERT_NEAR(y[i], x[i], std::fabs(c) * 0.6) << DTypeName(t) << " c=" << c << " i=" << i;
        }
      }
    }
  }
}

// ---- Hand-built blocks with exactly representable values ---------------------------------

TEST(DequantizeTest, Q8_0KnownBlock) {
  BlockQ8_0 b;
  b.d = F32ToF16(0.5f);
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j - 16);
  float y[32];
  DequantizeRow(DType::kQ8_0, &b, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.5f * (j - 16));
}

// 6-bit scales/mins packed per blocks.h, written out independently of the library.
void PackK4(const int* sc, const int* m, uint8_t* out) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
}

TEST(DequantizeTest, Q4_KKnownBlock) {
  const int sc[8] = {1, 2, 3, 17, 33, 47, 62, 63};
  const int m[8] = {0, 5, 16, 31, 32, 40, 50, 63};
  BlockQ4_K b;
  b.d = F32ToF16(0.25f);
  b.dmin = F32ToF16(0.5f);
  PackK4(sc, m, b.scales);
  auto q_of = [](int e) { return (e * 7 + 3) % 16; };
  for (int h = 0; h < 4; ++h) {
    for (int l = 0; l < 32; ++l) {
      b.qs[32 * h + l] = static_cast<uint8_t>(q_of(64 * h + l) | (q_of(64 * h + 32 + l) << 4));
    }
  }
  float y[256];
  DequantizeRow(DType::kQ4_K, &b, y, 256);
  for (int e = 0; e < 256; ++e) {
    const int g = e / 32;
    EXPECT_EQ(y[e], 0.25f * sc[g] * q_of(e) - 0.5f * m[g]) << e;
  }
}

TEST(DequantizeTest, Q5_KKnownBlock) {
  const int sc[8] = {63, 1, 9, 16, 31, 32, 48, 5};
  const int m[8] = {3, 63, 0, 17, 8, 40, 33, 1};
  BlockQ5_K b;
  b.d = F32ToF16(0.125f);
  b.dmin = F32ToF16(2.0f);
  PackK4(sc, m, b.scales);
  auto q_of = [](int e) { return (e * 13 + 5) % 32; };
  std::memset(b.qh, 0, sizeof(b.qh));
  for (int h = 0; h < 4; ++h) {
    for (int l = 0; l < 32; ++l) {
      const int q0 = q_of(64 * h + l), q1 = q_of(64 * h + 32 + l);
      b.qs[32 * h + l] = static_cast<uint8_t>((q0 & 15) | ((q1 & 15) << 4));
      b.qh[l] |= static_cast<uint8_t>(((q0 >> 4) << (2 * h)) | ((q1 >> 4) << (2 * h + 1)));
    }
  }
  float y[256];
  DequantizeRow(DType::kQ5_K, &b, y, 256);
  for (int e = 0; e < 256; ++e) {
    const int g = e / 32;
    EXPECT_EQ(y[e], 0.125f * sc[g] * q_of(e) - 2.0f * m[g]) << e;
  }
}

TEST(DequantizeTest, Q6_KKnownBlock) {
  BlockQ6_K b;
  b.d = F32ToF16(0.5f);
  for (int g = 0; g < 16; ++g) b.scales[g] = static_cast<int8_t>(g % 2 ? -3 * g : 8 * g - 60);
  auto q_of = [](int e) { return (e * 29 + 11) % 64; };  // stored value, minus 32 on decode
  std::memset(b.ql, 0, sizeof(b.ql));
  std::memset(b.qh, 0, sizeof(b.qh));
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, t = e % 128, quarter = t / 32, l = t % 32;
    const int q = q_of(e);
    b.ql[64 * h + 32 * (quarter % 2) + l] |= static_cast<uint8_t>((q & 15) << (4 * (quarter / 2)));
    b.qh[32 * h + l] |= static_cast<uint8_t>((q >> 4) << (2 * quarter));
  }
  float y[256];
  DequantizeRow(DType::kQ6_K, &b, y, 256);
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(y[e], 0.5f * b.scales[e / 16] * (q_of(e) - 32)) << e;
  }
}

TEST(DequantizeTest, Q3_KKnownBlock) {
  int s[16];  // 6-bit stored scales (value - 32 on decode)
  for (int g = 0; g < 16; ++g) s[g] = (g * 37 + 5) % 64;
  BlockQ3_K b;
  b.d = F32ToF16(0.25f);
  std::memset(b.scales, 0, sizeof(b.scales));
  for (int g = 0; g < 16; ++g) {
    b.scales[g % 8] |= static_cast<uint8_t>((s[g] & 15) << (g < 8 ? 0 : 4));
    b.scales[8 + g % 4] |= static_cast<uint8_t>((s[g] >> 4) << (2 * (g / 4)));
  }
  auto q_of = [](int e) { return (e * 5 + 1) % 8; };  // stored 0..7, minus 4 on decode
  std::memset(b.hmask, 0, sizeof(b.hmask));
  std::memset(b.qs, 0, sizeof(b.qs));
  for (int e = 0; e < 256; ++e) {
    const int q = q_of(e);
    b.qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>((q & 3) << (2 * ((e % 128) / 32)));
    if (q & 4) b.hmask[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
  }
  float y[256];
  DequantizeRow(DType::kQ3_K, &b, y, 256);
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(y[e], 0.25f * (s[e / 16] - 32) * (q_of(e) - 4)) << e;
  }
}

TEST(DequantizeTest, Q2_KKnownBlock) {
  BlockQ2_K b;
  b.d = F32ToF16(0.5f);
  b.dmin = F32ToF16(0.25f);
  for (int g = 0; g < 16; ++g)
    b.scales[g] = static_cast<uint8_t>((g % 16) | (((15 - g) % 16) << 4));
  auto q_of = [](int e) { return (e * 3 + e / 7) % 4; };
  std::memset(b.qs, 0, sizeof(b.qs));
  for (int e = 0; e < 256; ++e) {
    b.qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>(q_of(e) << (2 * ((e % 128) / 32)));
  }
  float y[256];
  DequantizeRow(DType::kQ2_K, &b, y, 256);
  for (int e = 0; e < 256; ++e) {
    const int g = e / 16;
    EXPECT_EQ(y[e], 0.5f * (b.scales[g] & 15) * q_of(e) - 0.25f * (b.scales[g] >> 4)) << e;
  }
}

TEST(QuantizeTest, Q8_0KnownRamp) {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);
  BlockQ8_0 b;
  QuantizeRow(DType::kQ8_0, x, &b, 32);
  EXPECT_EQ(b.d, F32ToF16(16.0f / 127));
  EXPECT_EQ(b.qs[0], -127);  // -16 * 127/16
  EXPECT_EQ(b.qs[16], 0);
  EXPECT_EQ(b.qs[17], 8);    // 7.9375 -> 8
  EXPECT_EQ(b.qs[18], 16);   // 15.875 -> 16
  EXPECT_EQ(b.qs[24], 64);   // 63.5 -> 64 (half away from zero)
  EXPECT_EQ(b.qs[8], -64);   // -63.5 -> -64
  EXPECT_EQ(b.qs[31], 119);  // 119.0625
}

TEST(QuantizeTest, Q8_KKnownBlockWithBsums) {
  std::vector<float> x(256);
  for (int j = 0; j < 256; ++j) x[j] = static_cast<float>((j % 17) - 8) / 4;
  x[100] = -4.0f;  // the largest magnitude, negative: scale = -127 / -4
  BlockQ8_K b;
  QuantizeRow(DType::kQ8_K, x.data(), &b, 256);
  EXPECT_EQ(b.d, 4.0f / 127);
  for (int j = 0; j < 256; ++j) {
    EXPECT_EQ(b.qs[j], static_cast<int>(std::nearbyint(x[j] * 127 / 4))) << j;
  }
  for (int g = 0; g < 16; ++g) {
    int s = 0;
    for (int l = 0; l < 16; ++l) s += b.qs[16 * g + l];
    EXPECT_EQ(b.bsums[g], s);
  }
}

TEST(QuantizeTest, Q8_0RequantizesItsOwnOutput) {
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const std::vector<float> x = RandomRow(32 * 64, seed, 0.01f + seed);
    std::vector<BlockQ8_0> q(64), q2(64);
    QuantizeRow(DType::kQ8_0, x.data(), q.data(), 32 * 64);
    std::vector<float> y(x.size());
    DequantizeRow(DType::kQ8_0, q.data(), y.data(), 32 * 64);
    QuantizeRow(DType::kQ8_0, y.data(), q2.data(), 32 * 64);
    ASSERT_EQ(std::memcmp(q.data(), q2.data(), q.size() * sizeof(BlockQ8_0)), 0) << seed;
  }
}

TEST(QuantizeTest, KQuantsRequantizeCloseToTheirOutput) {
  // Requantizing dequantized k-quant blocks may pick other scales, but never loses much.
  const std::vector<float> x = RandomRow(8 * 256, 9);
  for (DType t : {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    const std::vector<float> y = RoundTrip(t, x);
    const std::vector<float> z = RoundTrip(t, y);
    EXPECT_LE(Rmse(y, z), 0.5 * Rmse(x, y)) << DTypeName(t);
  }
}

// Random block bytes with sane f16 scales (random bytes would give NaN/inf scales).
std::vector<uint8_t> RandomBlocks(DType t, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(RowBytes(t, n));
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  const size_t bb = Traits(t).block_bytes;
  auto sane = [&](size_t off) {
    const uint16_t h = F32ToF16(std::ldexp(1.0f + (rng() % 1000) / 1000.0f, -(int)(rng() % 12)));
    std::memcpy(&bytes[off], &h, 2);
  };
  for (size_t b = 0; b < bytes.size(); b += bb) {
    switch (t) {
      case DType::kQ8_0: sane(b + offsetof(BlockQ8_0, d)); break;
      case DType::kQ2_K:
        sane(b + offsetof(BlockQ2_K, d));
        sane(b + offsetof(BlockQ2_K, dmin));
        break;
      case DType::kQ3_K: sane(b + offsetof(BlockQ3_K, d)); break;
      case DType::kQ4_K:
        sane(b + offsetof(BlockQ4_K, d));
        sane(b + offsetof(BlockQ4_K, dmin));
        break;
      case DType::kQ5_K:
        sane(b + offsetof(BlockQ5_K, d));
        sane(b + offsetof(BlockQ5_K, dmin));
        break;
      case DType::kQ6_K: sane(b + offsetof(BlockQ6_K, d)); break;
      case DType::kQ8_K: {
        const float d = 0.01f * (1 + rng() % 100);
        std::memcpy(&bytes[b], &d, 4);
        break;
      }
      case DType::kF16:
      case DType::kBF16: {
        for (size_t i = b; i < b + bb; i += 2) {
          const float f = std::ldexp(static_cast<float>(static_cast<int>(rng() % 2001) - 1000), -8);
          const uint16_t h = t == DType::kF16 ? F32ToF16(f) : F32ToBF16(f);
          std::memcpy(&bytes[i], &h, 2);
        }
        break;
      }
      case DType::kF32: {
        const float f = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 64;
        std::memcpy(&bytes[b], &f, 4);
        break;
      }
      case DType::kQ4_1:
      case DType::kQ5_1:
      case DType::kQ8_1:
        sane(b);
        sane(b + 2);  // m (or Q8_1's s)
        break;
      case DType::kQ4_0:
      case DType::kQ5_0:
      case DType::kIQ2_XXS:
      case DType::kIQ2_XS:
      case DType::kIQ2_S:
      case DType::kIQ3_XXS:
      case DType::kIQ3_S:
      case DType::kIQ1_S:
      case DType::kIQ4_NL:
      case DType::kIQ4_XS:
        sane(b);  // d leads every one of these blocks
        break;
      case DType::kIQ1_M:  // f16 super-scale in the top nibbles of the last 8 bytes
        for (int k = 0; k < 4; ++k) bytes[b + 48 + 2 * k + 1] &= 0x0F;
        bytes[b + 48 + 2 * 3 + 1] |= 0x30;  // exponent bits: a scale between 2^-15 and 2
        break;
      case DType::kMXFP4:
        bytes[b] = static_cast<uint8_t>(118 + rng() % 16);  // a scale near 2^0
        break;
    }
  }
  return bytes;
}

TEST(DequantizeTest, SimdMatchesScalarBitForBit) {
  for (DType t : kAllTypes) {
    const int64_t n = Traits(t).quantized ? 40 * 256 : 1037;  // odd length exercises tails
    for (uint32_t seed = 0; seed < 3; ++seed) {
      const std::vector<uint8_t> blocks = RandomBlocks(t, n, seed);
      std::vector<float> simd(static_cast<size_t>(n)), scalar(static_cast<size_t>(n));
      DequantizeRow(t, blocks.data(), simd.data(), n);
      DequantizeRowReference(t, blocks.data(), scalar.data(), n);
      ASSERT_EQ(std::memcmp(simd.data(), scalar.data(), simd.size() * sizeof(float)), 0)
          << DTypeName(t) << " isa=" << ActiveIsa();
    }
  }
}

TEST(DequantizeTest, ForcedScalarIsTheReference) {
  ForceScalarKernels(true);
  EXPECT_EQ(ActiveIsa(), "scalar");
  const std::vector<uint8_t> blocks = RandomBlocks(DType::kQ4_K, 512, 5);
  std::vector<float> a(512), b(512);
  DequantizeRow(DType::kQ4_K, blocks.data(), a.data(), 512);
  DequantizeRowReference(DType::kQ4_K, blocks.data(), b.data(), 512);
  ForceScalarKernels(false);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace colibri::quant
