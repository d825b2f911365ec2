#include "colibri/core/json.h"

#include <string>

#include "gtest/gtest.h"

namespace colibri {
namespace {

std::string Nested(int levels, char open, char close) {
  return std::string(static_cast<size_t>(levels), open) +
         std::string(static_cast<size_t>(levels), close);
}

TEST(ParseJsonTest, AcceptsUpToTheLimit) {
  auto j = ParseJson(Nested(kMaxJsonDepth, '[', ']'), "body");
  ASSERT_TRUE(j.ok()) << j.status();
  int depth = 0;
  const nlohmann::json* v = &*j;
  while (v->is_array() && !v->empty()) {
    v = &(*v)[0];
    ++depth;
  }
  EXPECT_EQ(depth, kMaxJsonDepth - 1);  // the innermost array is empty
}

TEST(ParseJsonTest, RefusesOneLevelMoreNamingTheLimit) {
  auto j = ParseJson(Nested(kMaxJsonDepth + 1, '[', ']'), "request body");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(j.status().message().find("request body"), std::string::npos);
  EXPECT_NE(j.status().message().find("64"), std::string::npos);
}

TEST(ParseJsonTest, HugeNestingIsRefusedWithoutRecursion) {
  // 400 KB of '{"a":' (objects) and of '[' (arrays, unterminated): refused, no crash.
  std::string objects;
  for (int i = 0; i < 80000; ++i) objects += "{\"a\":";
  objects += "1" + std::string(80000, '}');
  EXPECT_EQ(ParseJson(objects, "x").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseJson(std::string(400000, '['), "x").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ParseJsonTest, DeepValueInsideAShallowOneIsRefused) {
  std::string body = "{\"model\":\"m\",\"tools\":[" + Nested(70, '[', ']') + "]}";
  auto j = ParseJson(body, "body");
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("deeper than 64"), std::string::npos);
}

TEST(ParseJsonTest, TooDeepIsReportedApartFromInvalid) {
  bool too_deep = false;
  EXPECT_FALSE(ParseJson(Nested(kMaxJsonDepth + 1, '[', ']'), "x", kMaxJsonDepth, &too_deep).ok());
  EXPECT_TRUE(too_deep);
  EXPECT_FALSE(ParseJson("[1,", "x", kMaxJsonDepth, &too_deep).ok());
  EXPECT_FALSE(too_deep);
}

TEST(ParseJsonTest, InvalidJsonNamesWhat) {
  auto j = ParseJson("{\"a\":", "tools");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().message(), "tools is not valid JSON");
}

TEST(ParseJsonTest, OrderedJsonKeepsKeyOrder) {
  auto j = ParseJson<nlohmann::ordered_json>("{\"b\":1,\"a\":{\"c\":[1,2]}}", "kwargs");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->dump(), "{\"b\":1,\"a\":{\"c\":[1,2]}}");
}

}  // namespace
}  // namespace colibri
