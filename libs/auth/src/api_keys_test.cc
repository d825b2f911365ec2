#include "colibri/auth/api_keys.h"

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace colibri::auth {
namespace {

TEST(ConstantTimeEquals, Values) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("sekret", "sekret"));
  EXPECT_FALSE(ConstantTimeEquals("sekret", "sekreT"));
  EXPECT_FALSE(ConstantTimeEquals("Sekret", "sekret"));
  EXPECT_FALSE(ConstantTimeEquals("sekret", "sekret2"));
  EXPECT_FALSE(ConstantTimeEquals("sekret2", "sekret"));
  EXPECT_FALSE(ConstantTimeEquals("", "x"));
  EXPECT_FALSE(ConstantTimeEquals("x", ""));
  // A presented value that repeats the key (the modulo read of the shorter string) differs.
  EXPECT_FALSE(ConstantTimeEquals("abab", "ab"));
  EXPECT_FALSE(ConstantTimeEquals(absl::string_view("a\0b", 3), absl::string_view("a\0c", 3)));
  EXPECT_TRUE(ConstantTimeEquals(absl::string_view("a\0b", 3), absl::string_view("a\0b", 3)));
}

TEST(BearerToken, Parses) {
  EXPECT_EQ(BearerToken("Bearer abc").value_or(""), "abc");
  EXPECT_EQ(BearerToken("bearer  abc ").value_or(""), "abc");
  EXPECT_FALSE(BearerToken("Basic abc").has_value());
  EXPECT_FALSE(BearerToken("Bearer ").has_value());
  EXPECT_FALSE(BearerToken("Bearer").has_value());
  EXPECT_FALSE(BearerToken("abc").has_value());
}

TEST(ApiKeys, IdentifiesEachKey) {
  auto keys = ApiKeys::Load({"alpha", "beta"}, "");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->size(), 2u);
  EXPECT_EQ(keys->Identify("alpha").value_or(""), "key-1");
  EXPECT_EQ(keys->Identify("beta").value_or(""), "key-2");
  EXPECT_FALSE(keys->Identify("gamma").has_value());
  EXPECT_FALSE(keys->Identify("alph").has_value());
  EXPECT_FALSE(keys->Identify("").has_value());
  EXPECT_EQ(keys->Authenticate("Bearer beta").value_or("?"), "key-2");
  EXPECT_EQ(keys->Authenticate("Bearer nope").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(keys->Authenticate("").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(keys->Authenticate("alpha").status().code(), absl::StatusCode::kUnauthenticated);
}

TEST(ApiKeys, NoKeysIsOpen) {
  ApiKeys keys;
  EXPECT_TRUE(keys.empty());
  EXPECT_EQ(keys.Authenticate("").value_or("?"), "");
  EXPECT_EQ(keys.Authenticate("Bearer x").value_or("?"), "");
}

TEST(ApiKeys, RefusesBadKeys) {
  EXPECT_EQ(ApiKeys::Load({""}, "").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ApiKeys::Load({"a b"}, "").status().code(), absl::StatusCode::kInvalidArgument);
  auto dup = ApiKeys::Load({"a", "a"}, "");
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(dup.status().message().find("repeats"), std::string::npos) << dup.status();
}

class KeyFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("colibri_keys_" + std::to_string(::getpid()) + "_" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                .string();
  }
  void TearDown() override { std::remove(path_.c_str()); }
  void Write(const std::string& text) {
    std::ofstream(path_) << text;
    ::chmod(path_.c_str(), 0600);
  }
  std::string path_;
};

TEST_F(KeyFileTest, ReadsKeysSkippingCommentsAndBlanks) {
  Write("# team keys\n\n  first-key  \n# second team\nsecond-key\n\n");
  auto keys = ApiKeys::Load({"cli-key"}, path_);
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->size(), 3u);
  EXPECT_EQ(keys->Identify("cli-key").value_or(""), "key-1");
  EXPECT_EQ(keys->Identify("first-key").value_or(""), "key-2");
  EXPECT_EQ(keys->Identify("second-key").value_or(""), "key-3");
  EXPECT_FALSE(keys->Identify("# team keys").has_value());
}

TEST_F(KeyFileTest, EmptyFileIsAnError) {
  Write("# nothing here\n\n");
  auto keys = ApiKeys::Load({}, path_);
  EXPECT_EQ(keys.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(keys.status().message().find("holds no key"), std::string::npos) << keys.status();
}

TEST_F(KeyFileTest, MissingFileIsNotFound) {
  auto keys = ApiKeys::Load({}, path_ + ".absent");
  EXPECT_EQ(keys.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(KeyFileTest, LineWithInnerSpaceIsRefusedWithItsLine) {
  Write("good\nbad key\n");
  auto keys = ApiKeys::Load({}, path_);
  EXPECT_EQ(keys.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(keys.status().message().find("line 2"), std::string::npos) << keys.status();
}

}  // namespace
}  // namespace colibri::auth
