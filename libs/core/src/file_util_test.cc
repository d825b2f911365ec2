#include "colibri/core/file_util.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "colibri/core/checksum.h"

namespace colibri {
namespace {

TEST(FileUtil, AtomicWriteThenReadAndMap) {
  auto dir = std::filesystem::temp_directory_path() / "colibri_file_util_test dir é";
  std::filesystem::create_directories(dir);
  auto path = dir / "data.bin";
  ASSERT_TRUE(WriteFileAtomic(path, "hello world").ok());
  EXPECT_FALSE(std::filesystem::exists(dir / "data.bin.tmp"));
  EXPECT_EQ(*ReadFileToString(path), "hello world");
  auto mapped = MappedFile::Open(path);
  ASSERT_TRUE(mapped.ok());
  EXPECT_EQ(mapped->size(), 11u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(mapped->data()), 5), "hello");
  std::filesystem::remove_all(dir);
}

TEST(FileUtil, MissingFileIsNotFoundWithPath) {
  auto r = ReadFileToString("/nonexistent/colibri/x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/colibri/x"), std::string::npos);
}

TEST(Checksum, HexRoundTrip) {
  uint64_t c = Checksum64("abc", 3);
  uint64_t back = 0;
  ASSERT_TRUE(ParseChecksumHex(ChecksumHex(c), &back));
  EXPECT_EQ(back, c);
  EXPECT_NE(Checksum64("abd", 3), c);
  EXPECT_FALSE(ParseChecksumHex("xyz", &back));
}

TEST(AlignedBytes, Aligned) {
  auto b = AllocateAligned(100, 4096);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->get()) % 4096, 0u);
}

}  // namespace
}  // namespace colibri
