// A GGUF served in place against the container the importer writes from the same file: the same
// tensors byte for byte, found from a file, a split part or a directory; truncation, changed
// bytes and ambiguous directories named.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "colibri/model/container.h"
#include "colibri/model/convert.h"

namespace colibri::model {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::optional<fs::path> OracleFile(const char* name) {
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("COLIBRI_ORACLE_DIR")) candidates.emplace_back(env);
  candidates.emplace_back("../shared/oracle");
  const fs::path repo = fs::path(__FILE__).parent_path().parent_path().parent_path().parent_path();
  candidates.push_back(repo / ".." / "shared" / "oracle");
  for (const auto& dir : candidates) {
    if (fs::exists(dir / name)) return dir / name;
  }
  return std::nullopt;
}

class GgufInPlaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto src = OracleFile("mixtral-tiny-q4_k_m.gguf");
    if (!src) GTEST_SKIP() << "peer oracle not found (set COLIBRI_ORACLE_DIR or ../shared/oracle)";
    dir_ = fs::path(::testing::TempDir()) / ("gguf_in_place_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "models");
    gguf_ = dir_ / "models" / "tiny.gguf";
    fs::copy_file(*src, gguf_);
    fs::permissions(gguf_, fs::perms::owner_read | fs::perms::owner_write);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  fs::path dir_, gguf_;
};

TEST_F(GgufInPlaceTest, SameTensorsAsTheConvertedContainer) {
  ConvertOptions o;
  o.quantize = "keep";
  ASSERT_TRUE(ConvertGguf(gguf_, dir_ / "converted", o).ok());
  auto conv = Container::Open(dir_ / "converted");
  ASSERT_TRUE(conv.ok()) << conv.status();
  for (const fs::path& path : {gguf_, gguf_.parent_path()}) {
    SCOPED_TRACE(path.string());
    auto in_place = Container::Open(path);
    ASSERT_TRUE(in_place.ok()) << in_place.status();
    ASSERT_TRUE((*in_place)->in_place());
    const Manifest& a = (*conv)->manifest();
    const Manifest& b = (*in_place)->manifest();
    EXPECT_EQ(b.name, "tiny");
    EXPECT_EQ((*in_place)->state_dir(), gguf_.parent_path() / "tiny.colibri");
    EXPECT_EQ((*in_place)->tokenizer_path(), gguf_);
    ASSERT_EQ(a.dense.size(), b.dense.size());
    auto da = (*conv)->LoadDense();
    auto db = (*in_place)->LoadDense();
    ASSERT_TRUE(da.ok() && db.ok()) << db.status();
    for (size_t i = 0; i < a.dense.size(); ++i) {
      ASSERT_EQ(a.dense[i].name, b.dense[i].name);
      ASSERT_EQ(a.dense[i].dtype, b.dense[i].dtype);
      ASSERT_EQ(a.dense[i].shape, b.dense[i].shape);
      ASSERT_EQ(a.dense[i].size, b.dense[i].size);
      EXPECT_EQ(std::memcmp(da->buffer.get() + a.dense[i].offset,
                            db->buffer.get() + b.dense[i].offset, a.dense[i].size),
                0)
          << a.dense[i].name;
    }
    ASSERT_EQ(a.experts.size(), b.experts.size());
    for (size_t i = 0; i < a.experts.size(); ++i) {
      const ExpertBlock& x = a.experts[i];
      const ExpertBlock& y = b.experts[i];
      ASSERT_EQ(x.id, y.id);
      ASSERT_EQ(y.ranges.size(), x.parts.size());
      auto bx = (*conv)->ReadExpertBlock(x.id);
      auto by = (*in_place)->ReadExpertBlock(y.id);
      ASSERT_TRUE(bx.ok() && by.ok()) << by.status();
      for (size_t p = 0; p < x.parts.size(); ++p) {
        ASSERT_EQ(x.parts[p].name, y.parts[p].name);
        ASSERT_EQ(x.parts[p].dtype, y.parts[p].dtype);
        ASSERT_EQ(x.parts[p].size, y.parts[p].size);
        EXPECT_EQ(std::memcmp(bx->get() + x.parts[p].offset, by->get() + y.parts[p].offset,
                              x.parts[p].size),
                  0);
        // Every range is O_DIRECT-readable.
        EXPECT_EQ(y.ranges[p].offset % kExpertBlockAlignment, 0u);
        EXPECT_EQ(y.ranges[p].length % kExpertBlockAlignment, 0u);
      }
    }
  }
  // The checksums recorded by those reads were persisted and are known at the next open.
  auto again = Container::Open(gguf_);
  ASSERT_TRUE(again.ok()) << again.status();
  for (const auto& b : (*again)->manifest().experts) EXPECT_TRUE(b.checksum_known);
}

TEST_F(GgufInPlaceTest, ChangedBytesAreDataLossNeverServed) {
  const ExpertBlock* block = nullptr;
  {
    auto c = Container::Open(gguf_);
    ASSERT_TRUE(c.ok()) << c.status();
    block = &(*c)->manifest().experts[3];
    ASSERT_TRUE((*c)->ReadExpertBlock(block->id).ok());
    // Rewritten under the open server: the next read of the block is refused.
    const FileRange& r = block->ranges[1];
    const uint64_t at = r.offset + (block->parts[1].offset - r.at) + 7;
    {
      std::fstream f(gguf_, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(at));
      f.put('\x5a');
    }
    auto changed = (*c)->ReadExpertBlock(block->id);
    EXPECT_EQ(changed.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(changed.status().message()), HasSubstr("changed since"));
  }
  // A file whose identity changed (its time) is recorded anew, not checked against stale sums.
  auto reopened = Container::Open(gguf_);
  ASSERT_TRUE(reopened.ok());
  EXPECT_FALSE((*reopened)->manifest().experts[3].checksum_known);
}

TEST_F(GgufInPlaceTest, TruncatedDownloadIsNamedWithWhatIsMissing) {
  const uint64_t size = fs::file_size(gguf_);
  fs::resize_file(gguf_, size - 100000);
  auto c = Container::Open(gguf_);
  ASSERT_EQ(c.status().code(), absl::StatusCode::kDataLoss) << c.status();
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("is truncated"));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("100000 bytes missing"));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("unfinished download"));
}

TEST_F(GgufInPlaceTest, DirectoriesAndSplitPartsFindTheModel) {
  // A directory with two models names both.
  fs::copy_file(gguf_, gguf_.parent_path() / "other.gguf");
  auto two = FindGgufModel(gguf_.parent_path());
  EXPECT_EQ(two.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(two.status().message()), HasSubstr("other.gguf, tiny.gguf"));
  // Any part of a split set stands for its first part; later parts are not models of their own.
  const fs::path split = dir_ / "split";
  fs::create_directories(split);
  for (const char* name : {"m-00001-of-00002.gguf", "m-00002-of-00002.gguf"})
    fs::copy_file(gguf_, split / name);
  auto from_second = FindGgufModel(split / "m-00002-of-00002.gguf");
  ASSERT_TRUE(from_second.ok() && *from_second);
  EXPECT_EQ(**from_second, split / "m-00001-of-00002.gguf");
  auto from_dir = FindGgufModel(split);
  ASSERT_TRUE(from_dir.ok() && *from_dir);
  EXPECT_EQ(**from_dir, split / "m-00001-of-00002.gguf");
  // A colibri model directory is not a GGUF model even with a tokenizer.gguf in it.
  fs::create_directories(dir_ / "container");
  fs::copy_file(gguf_, dir_ / "container" / "tokenizer.gguf");
  std::ofstream(dir_ / "container" / "manifest.json") << "{}";
  auto container = FindGgufModel(dir_ / "container");
  ASSERT_TRUE(container.ok());
  EXPECT_FALSE(container->has_value());
}

}  // namespace
}  // namespace colibri::model
