#include "colibri/core/file_util.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "colibri/core/checksum.h"
#include "colibri/core/testing/small_tmpfs.h"

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

TEST(FileUtil, AtomicWriteUsesTheModeAndLeavesNoTempFileWhenItFails) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("colibri_file_util_fail_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  ASSERT_TRUE(WriteFileAtomic(dir / "private.bin", "secret", 0600).ok());
  struct stat st {};
  ASSERT_EQ(::stat((dir / "private.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // The rename fails (the target is a directory that is not empty): the temp file must go.
  fs::create_directories(dir / "taken" / "child");
  absl::Status s = WriteFileAtomic(dir / "taken", "data");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rename"), std::string::npos) << s;
  EXPECT_FALSE(fs::exists(dir / "taken.tmp"));
  fs::remove_all(dir);
}

TEST(FileUtil, AtomicWriteOnAFullDiskIsResourceExhaustedAndCleansUp) {
  namespace fs = std::filesystem;
  auto tmpfs = testing::SmallTmpfs::Mount(64 << 10);
  if (!tmpfs.ok()) GTEST_SKIP() << tmpfs.status().message();
  const fs::path path = (*tmpfs)->path() / "big.bin";
  const std::string big(1 << 20, 'x');
  absl::Status s = WriteFileAtomic(path, big);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("big.bin.tmp"), std::string::npos) << s;
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(fs::path(path) += ".tmp"));
  // The space of the failed write was given back: a small file fits again.
  EXPECT_TRUE(WriteFileAtomic((*tmpfs)->path() / "small.bin", std::string(16 << 10, 'y')).ok());
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
