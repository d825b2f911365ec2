#include "colibri/quant/fp16.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "gtest/gtest.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace colibri::quant {
namespace {

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t ToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Independent definition of round-to-nearest-even: pick the nearer of the two candidate
// encodings bracketing |f| (computed in double), ties to the even one.
uint16_t NearestEvenF16(float f) {
  if (std::isnan(f)) return 0x7e00 | (std::signbit(f) ? 0x8000 : 0);
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  uint16_t lo = 0;
  // Largest encoding whose value <= a (linear search by bisection over 0..0x7c00).
  uint16_t left = 0, right = 0x7c00;
  while (left < right) {
    const uint16_t mid = static_cast<uint16_t>((left + right + 1) / 2);
    if (static_cast<double>(F16ToF32(mid)) <= a) {
      left = mid;
    } else {
      right = static_cast<uint16_t>(mid - 1);
    }
  }
  lo = left;
  if (lo == 0x7c00) return sign | 0x7c00;
  const double vlo = F16ToF32(lo);
  // The value above 0x7bff is 65536 for rounding purposes (what infinity replaces).
  const double vhi = lo == 0x7bff ? 65536.0 : static_cast<double>(F16ToF32(lo + 1));
  if (a - vlo < vhi - a) return sign | lo;
  if (a - vlo > vhi - a) return sign | static_cast<uint16_t>(lo + 1);
  return sign | ((lo & 1) ? static_cast<uint16_t>(lo + 1) : lo);
}

TEST(Fp16Test, KnownValues) {
  EXPECT_EQ(F32ToF16(1.0f), 0x3c00);
  EXPECT_EQ(F32ToF16(-2.0f), 0xc000);
  EXPECT_EQ(F32ToF16(0.0f), 0x0000);
  EXPECT_EQ(F32ToF16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(65519.99f), 0x7bff);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);  // tie between 65504 and 65536 -> even -> inf
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(F32ToF16(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even (zero)
  EXPECT_EQ(F32ToF16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(F32ToF16(std::ldexp(3.0f, -25)), 0x0002);         // 1.5 units: tie -> even (2)
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -14)), 0x0400);         // smallest normal
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie -> even
  EXPECT_EQ(F32ToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(F32ToF16(std::nanf("")), 0x7e00);
  EXPECT_EQ(F16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(F16ToF32(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(F16ToF32(0xfc00)) && F16ToF32(0xfc00) < 0);
  EXPECT_TRUE(std::isnan(F16ToF32(0x7e00)));
  EXPECT_TRUE(std::signbit(F16ToF32(0x8000)));
}

TEST(Fp16Test, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_EQ(F32ToF16(f) & 0x7fff, 0x7e00) << std::hex << h;
      continue;
    }
    ASSERT_EQ(F32ToF16(f), h) << std::hex << h;
  }
}

TEST(Fp16Test, MatchesIndependentRounding) {
  // Every float in the f16 range and beyond, on a stride that visits all exponents and many
  // mantissa patterns, plus the exact midpoints between neighbouring halves.
  for (uint64_t u = 0; u < 0x48000000u; u += 4093) {
    const float f = FromBits(static_cast<uint32_t>(u));
    ASSERT_EQ(F32ToF16(f), NearestEvenF16(f)) << std::hex << u;
    ASSERT_EQ(F32ToF16(-f), NearestEvenF16(-f)) << std::hex << u;
  }
  for (uint32_t h = 0; h < 0x7bff; ++h) {
    const double mid = (static_cast<double>(F16ToF32(static_cast<uint16_t>(h))) +
                        F16ToF32(static_cast<uint16_t>(h + 1))) /
                       2;
    const float f = static_cast<float>(mid);  // exact: a half midpoint needs 12 bits
    ASSERT_EQ(F32ToF16(f), NearestEvenF16(f)) << std::hex << h;
  }
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("f16c"))) uint16_t HardwareF32ToF16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float HardwareF16ToF32(uint16_t h) { return _cvtsh_ss(h); }

bool HasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;  // CPUID.1:ECX.F16C
}

TEST(Fp16Test, MatchesF16cHardware) {
  if (!HasF16c()) GTEST_SKIP() << "CPU has no F16C";
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float a = F16ToF32(static_cast<uint16_t>(h));
    const float b = HardwareF16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(a)) {
      ASSERT_TRUE(std::isnan(b));
      continue;
    }
    ASSERT_EQ(ToBits(a), ToBits(b)) << std::hex << h;
  }
  for (uint64_t u = 0; u < 0x100000000ull; u += 257) {
    const float f = FromBits(static_cast<uint32_t>(u));
    if (std::isnan(f)) continue;  // payload handling differs (documented)
    ASSERT_EQ(F32ToF16(f), HardwareF32ToF16(f)) << std::hex << u;
  }
}
#endif

TEST(Bf16Test, RoundsToNearestEven) {
  EXPECT_EQ(F32ToBF16(1.0f), 0x3f80);
  EXPECT_EQ(F32ToBF16(FromBits(0x3f808000)), 0x3f80);  // tie, even stays
  EXPECT_EQ(F32ToBF16(FromBits(0x3f818000)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(F32ToBF16(FromBits(0x3f808001)), 0x3f81);
  EXPECT_EQ(F32ToBF16(FromBits(0x7f7fffff)), 0x7f80);  // FLT_MAX rounds to infinity
  EXPECT_EQ(F32ToBF16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(F32ToBF16(FromBits(0x00000001)), 0x0000);  // tiny subnormal
  EXPECT_EQ(BF16ToF32(0x3f80), 1.0f);
  EXPECT_EQ(BF16ToF32(0xc000), -2.0f);
}

TEST(Bf16Test, NanStaysNan) {
  for (uint32_t nan_bits : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu}) {
    const uint16_t b = F32ToBF16(FromBits(nan_bits));
    EXPECT_TRUE(std::isnan(BF16ToF32(b))) << std::hex << nan_bits;
    EXPECT_EQ(b & 0x8000, (nan_bits >> 16) & 0x8000);
  }
}

TEST(Bf16Test, EveryBf16RoundTripsAndNeighboursAreNearest) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = BF16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(F32ToBF16(f), h);
  }
  for (uint64_t u = 0; u < 0x7f800000u; u += 65537) {  // finite positives
    const float f = FromBits(static_cast<uint32_t>(u));
    const uint16_t r = F32ToBF16(f);
    const double err = std::fabs(static_cast<double>(BF16ToF32(r)) - f);
    const uint16_t down = static_cast<uint16_t>(u >> 16);
    const double err_down = std::fabs(static_cast<double>(BF16ToF32(down)) - f);
    const double err_up = std::fabs(static_cast<double>(BF16ToF32(down + 1)) - f);
    ASSERT_LE(err, err_down);
    ASSERT_LE(err, err_up);
  }
}

}  // namespace
}  // namespace colibri::quant
