#include "colibri/quant/dtype.h"

#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

namespace colibri::quant {
namespace {

TEST(DTypeTest, TraitsMatchGgml) {
  struct Expected {
    DType type;
    const char* name;
    int64_t block_elems;
    size_t block_bytes;
    DType vec_dot;
    bool quantized;
  };
  const Expected kExpected[] = {
      {DType::kF32, "f32", 1, 4, DType::kF32, false},
      {DType::kF16, "f16", 1, 2, DType::kF16, false},
      {DType::kBF16, "bf16", 1, 2, DType::kBF16, false},
      {DType::kQ8_0, "q8_0", 32, 34, DType::kQ8_0, true},
      {DType::kQ2_K, "q2_k", 256, 84, DType::kQ8_K, true},
      {DType::kQ3_K, "q3_k", 256, 110, DType::kQ8_K, true},
      {DType::kQ4_K, "q4_k", 256, 144, DType::kQ8_K, true},
      {DType::kQ5_K, "q5_k", 256, 176, DType::kQ8_K, true},
      {DType::kQ6_K, "q6_k", 256, 210, DType::kQ8_K, true},
      {DType::kQ8_K, "q8_k", 256, 292, DType::kQ8_K, true},
  };
  for (const Expected& e : kExpected) {
    const TypeTraits& t = Traits(e.type);
    EXPECT_EQ(t.name, e.name);
    EXPECT_EQ(t.block_elems, e.block_elems) << e.name;
    EXPECT_EQ(t.block_bytes, e.block_bytes) << e.name;
    EXPECT_EQ(t.vec_dot_type, e.vec_dot) << e.name;
    EXPECT_EQ(t.quantized, e.quantized) << e.name;
    EXPECT_EQ(DTypeName(e.type), e.name);
    EXPECT_TRUE(IsKnownDType(static_cast<uint32_t>(e.type)));
  }
}

TEST(DTypeTest, GgmlIdsAreTheEnumValues) {
  EXPECT_EQ(static_cast<uint32_t>(DType::kQ8_0), 8u);
  EXPECT_EQ(static_cast<uint32_t>(DType::kQ4_K), 12u);
  EXPECT_EQ(static_cast<uint32_t>(DType::kBF16), 30u);
  EXPECT_EQ(static_cast<uint32_t>(DType::kIQ1_M), 29u);
  // Types we do not read (I8..F64, removed ids, TQ1_0, TQ2_0) and beyond the table.
  for (uint32_t id : {4u, 5u, 24u, 28u, 31u, 34u, 35u, 40u, 1000u, 0xffffffffu}) {
    EXPECT_FALSE(IsKnownDType(id)) << id;
  }
  EXPECT_EQ(Traits(static_cast<DType>(34)).name, "invalid");
  EXPECT_EQ(Traits(static_cast<DType>(12345)).block_bytes, 0u);
}

TEST(DTypeTest, ParseAcceptsAnyCase) {
  EXPECT_EQ(*ParseDType("q4_k"), DType::kQ4_K);
  EXPECT_EQ(*ParseDType("Q4_K"), DType::kQ4_K);
  EXPECT_EQ(*ParseDType("BF16"), DType::kBF16);
  EXPECT_EQ(*ParseDType("q8_0"), DType::kQ8_0);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ2_K, DType::kQ3_K,
                  DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K}) {
    EXPECT_EQ(*ParseDType(DTypeName(t)), t);
  }
}

TEST(DTypeTest, ParseRejectsUnknownNames) {
  for (const char* bad : {"", "tq1_0", "q4k", "float", "f32 ", "invalid"}) {
    auto r = ParseDType(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_NE(ParseDType("tq1_0").status().message().find("tq1_0"), absl::string_view::npos);
  EXPECT_NE(ParseDType("tq1_0").status().message().find("iq1_m"),
            absl::string_view::npos);  // lists them all
}

TEST(DTypeTest, RowBytes) {
  EXPECT_EQ(RowBytes(DType::kF32, 7), 28u);
  EXPECT_EQ(RowBytes(DType::kF16, 7), 14u);
  EXPECT_EQ(RowBytes(DType::kQ8_0, 4096), 128u * 34);
  EXPECT_EQ(RowBytes(DType::kQ4_K, 4096), 16u * 144);
  EXPECT_EQ(RowBytes(DType::kQ6_K, 0), 0u);
  EXPECT_EQ(*CheckedRowBytes(DType::kQ5_K, 512), 2u * 176);
}

TEST(DTypeTest, CheckedRowBytesRefusesBadSizes) {
  EXPECT_EQ(CheckedRowBytes(DType::kQ4_K, 100).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckedRowBytes(DType::kQ8_0, -32).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckedRowBytes(DType::kF32, std::numeric_limits<int64_t>::max()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckedRowBytes(static_cast<DType>(34), 32).status().code(),
            absl::StatusCode::kInvalidArgument);
  // The largest Q8_0 row that fits: no false overflow.
  EXPECT_TRUE(CheckedRowBytes(DType::kQ8_0, int64_t{1} << 40).ok());
}

}  // namespace
}  // namespace colibri::quant
