// IQ3_XXS, IQ3_S, IQ2_XS, IQ2_S, IQ1_S and IQ1_M: hand-built blocks dequantize to the values the
// formats define (grid points spelled out from GGML's tables), and every field lands where
// blocks.h says. Dot products are checked with the other formats in nonk_quant_test.cc.
#include <cstring>
#include <vector>

#include "colibri/quant/blocks.h"
#include "colibri/quant/dtype.h"
#include "gtest/gtest.h"
#include "nonk_quant_test_util.h"

namespace colibri::quant {
namespace {

// GGML's iq2xs_grid[400], iq2s_grid[800] and [801], iq3xxs_grid[200] and [201], iq3s_grid[400]
// and [401], iq1s_grid[700], byte j = value j.
constexpr float kIq2xs400[8] = {8, 8, 8, 8, 8, 8, 8, 43};
constexpr float kIq2s800[8] = {8, 8, 8, 43, 8, 25, 43, 25};
constexpr float kIq2s801[8] = {25, 8, 8, 8, 25, 25, 43, 25};
constexpr float kIq3xxs200[4] = {4, 62, 4, 44};
constexpr float kIq3xxs201[4] = {4, 4, 12, 44};
constexpr float kIq3s400[4] = {7, 9, 15, 9};
constexpr float kIq3s401[4] = {3, 11, 15, 9};
constexpr float kIq1s700[8] = {0, -1, 0, 0, -1, 0, -1, 0};

TEST(LowBitIQuantsTest, Iq2XsIndexSignsAndTwoScalesPerGroup) {
  BlockIQ2_XS b{};
  b.d = kOne;
  b.qs[0] = 400 | (1 << 9);  // sign field 1: pattern 129, values 0 and 7 negative
  b.scales[0] = 0x21;        // first 16 values s = 1, last 16 s = 2
  const std::vector<float> y = Dequant(DType::kIQ2_XS, &b, 256);
  const float db0 = 1.5f * 0.25f, db1 = 2.5f * 0.25f;
  for (int j = 0; j < 8; ++j)
    EXPECT_EQ(y[j], db0 * kIq2xs400[j] * (j == 0 || j == 7 ? -1.f : 1.f)) << j;
  for (int j = 8; j < 16; ++j) EXPECT_EQ(y[j], db0 * 8) << j;   // point 0: all 8s
  for (int j = 16; j < 32; ++j) EXPECT_EQ(y[j], db1 * 8) << j;  // the second scale
  for (int j = 32; j < 256; ++j) EXPECT_EQ(y[j], 0.5f * 0.25f * 8) << j;
}

TEST(LowBitIQuantsTest, Iq2SHighIndexBitsAndPlainSignBytes) {
  BlockIQ2_S b{};
  b.d = kOne;
  b.qs[0] = 800 & 0xFF;
  b.qs[1] = 801 & 0xFF;
  b.qh[0] = 0x3 | (0x3 << 2);  // bits 8-9 of points 0 and 1
  b.qs[32] = 0x81;             // signs of point 0: values 0 and 7
  b.qs[33] = 0x02;             // point 1: value 1 (no parity rule)
  b.scales[0] = 0x30;          // s = 0, then 3
  const std::vector<float> y = Dequant(DType::kIQ2_S, &b, 256);
  const float db0 = 0.5f * 0.25f, db1 = 3.5f * 0.25f;
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(y[j], db0 * kIq2s800[j] * (j == 0 || j == 7 ? -1.f : 1.f)) << j;
    EXPECT_EQ(y[8 + j], db0 * kIq2s801[j] * (j == 1 ? -1.f : 1.f)) << j;
  }
  for (int j = 16; j < 32; ++j) EXPECT_EQ(y[j], db1 * 8) << j;
}

TEST(LowBitIQuantsTest, Iq3XxsPairsOfFourValuePoints) {
  BlockIQ3_XXS b{};
  b.d = kOne;
  b.qs[8] = 200;                         // group 1, values 0-3
  b.qs[9] = 201;                         // group 1, values 4-7
  const uint32_t aux = (2u << 28) | 1u;  // scale 2; sign field 1 -> values 0 and 7 negative
  std::memcpy(&b.qs[64 + 4], &aux, sizeof(aux));
  const std::vector<float> y = Dequant(DType::kIQ3_XXS, &b, 256);
  const float db = 2.5f * 0.5f;
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(y[32 + j], db * kIq3xxs200[j] * (j == 0 ? -1.f : 1.f)) << j;
    EXPECT_EQ(y[36 + j], db * kIq3xxs201[j] * (j == 3 ? -1.f : 1.f)) << j;
  }
  for (int j = 40; j < 64; ++j) EXPECT_EQ(y[j], db * 4) << j;          // point 0: all 4s
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.5f * 0.5f * 4) << j;  // group 0: s = 0
}

TEST(LowBitIQuantsTest, Iq3SNinthIndexBitSignsAndOddScales) {
  BlockIQ3_S b{};
  b.d = kOne;
  b.qs[8] = 400 & 0xFF;  // group 1, point 0
  b.qs[9] = 401 & 0xFF;  // group 1, point 1
  b.qh[1] = 0x3;         // their ninth bits
  b.signs[4] = 0x81;     // group 1, values 0 and 7
  b.scales[0] = 0x30;    // group 0: 1 + 2*0, group 1: 1 + 2*3
  const std::vector<float> y = Dequant(DType::kIQ3_S, &b, 256);
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(y[32 + j], 7 * kIq3s400[j] * (j == 0 ? -1.f : 1.f)) << j;
    EXPECT_EQ(y[36 + j], 7 * kIq3s401[j] * (j == 3 ? -1.f : 1.f)) << j;
  }
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 1.f) << j;  // point 0: all 1s
  for (int j = 40; j < 64; ++j) EXPECT_EQ(y[j], 7.f) << j;
}

TEST(LowBitIQuantsTest, Iq1SGridPlusSignedShift) {
  BlockIQ1_S b{};
  b.d = kHalf;
  b.qs[8] = 700 & 0xFF;                                              // group 2, point 0
  b.qh[2] = static_cast<uint16_t>((700 >> 8) | (3 << 12) | 0x8000);  // index bits, s = 3, shift -
  const std::vector<float> y = Dequant(DType::kIQ1_S, &b, 256);
  const float dl = 0.5f * 7;
  for (int j = 0; j < 8; ++j) EXPECT_EQ(y[64 + j], dl * (kIq1s700[j] - 0.125f)) << j;
  for (int j = 72; j < 96; ++j) EXPECT_EQ(y[j], dl * (-1 - 0.125f)) << j;   // point 0: all -1
  for (int j = 0; j < 64; ++j) EXPECT_EQ(y[j], 0.5f * (-1 + 0.125f)) << j;  // s = 0, shift +
}

TEST(LowBitIQuantsTest, Iq1MSplitSuperScaleAndHalfGroupScales) {
  BlockIQ1_M b{};
  SetIq1mSuperScale(&b, kOne);
  uint16_t sc0;
  std::memcpy(&sc0, b.scales, sizeof(sc0));
  sc0 = static_cast<uint16_t>(sc0 | (2 << 6) | (1 << 9));  // group 1: s = 2, then 1
  std::memcpy(b.scales, &sc0, sizeof(sc0));
  b.qs[4] = 700 & 0xFF;         // group 1, point 0
  b.qh[2] = (700 >> 8) | 0x08;  // its index bits, shift negative
  const std::vector<float> y = Dequant(DType::kIQ1_M, &b, 256);
  for (int j = 0; j < 8; ++j) EXPECT_EQ(y[32 + j], 5 * (kIq1s700[j] - 0.125f)) << j;
  for (int j = 40; j < 48; ++j) EXPECT_EQ(y[j], 5 * (-1 + 0.125f)) << j;  // point 0, shift +
  for (int j = 48; j < 64; ++j) EXPECT_EQ(y[j], 3 * (-1 + 0.125f)) << j;  // second half scale
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], -1 + 0.125f) << j;
}

}  // namespace
}  // namespace colibri::quant
