#include "colibri/engine/kv_store.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

namespace colibri::engine {
namespace {

namespace fs = std::filesystem;

KvSnapshot MakeSnapshot(std::vector<int32_t> tokens, quant::DType dtype = quant::DType::kF32) {
  KvSnapshot s;
  s.tokens = std::move(tokens);
  s.session_id = "sess";
  s.dtype = dtype;
  s.n_layers = 2;
  s.kv_dim = 32;
  s.rows.resize(2 * 2 * s.tokens.size() * s.RowBytes());
  std::iota(s.rows.begin(), s.rows.end(), uint8_t{1});
  return s;
}

class KvStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("colibri_kv_store_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  KvStoreOptions Options(uint64_t ram, bool disk) const {
    KvStoreOptions o;
    o.ram_limit = ram;
    if (disk) o.dir = dir_;
    o.model_fingerprint = "fp";
    o.n_layers = 2;
    o.kv_dim = 32;
    return o;
  }

  fs::path dir_;
};

TEST_F(KvStoreTest, EncodeDecodeRoundTripAndRejectsDamage) {
  const KvSnapshot s = MakeSnapshot({5, 6, 7}, quant::DType::kQ8_0);
  const std::string bytes = KvStore::Encode(s, "fp");
  auto back = KvStore::Decode(bytes, "fp", "mem");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->tokens, s.tokens);
  EXPECT_EQ(back->session_id, "sess");
  EXPECT_EQ(back->dtype, quant::DType::kQ8_0);
  EXPECT_EQ(back->rows, s.rows);
  EXPECT_EQ(KvStore::Decode(bytes, "other", "mem").status().code(), absl::StatusCode::kFailedPrecondition);
  std::string flipped = bytes;
  flipped[bytes.size() - 20] ^= 1;
  EXPECT_EQ(KvStore::Decode(flipped, "fp", "mem").status().code(), absl::StatusCode::kDataLoss);
  for (size_t cut : {size_t{0}, size_t{10}, size_t{47}, bytes.size() / 2, bytes.size() - 1}) {
    auto r = KvStore::Decode(std::string_view(bytes).substr(0, cut), "fp", "mem");
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << cut;
  }
  std::string huge = bytes;
  huge[32] = 0x7f;  // n_tokens high byte region: implausible
  EXPECT_FALSE(KvStore::Decode(huge, "fp", "mem").ok());
}

TEST_F(KvStoreTest, LongestPrefixWinsAndOneTokenIsAlwaysRecomputed) {
  auto store = KvStore::Open(Options(1 << 20, false));
  ASSERT_TRUE(store.ok());
  (*store)->Put(MakeSnapshot({1, 2, 3}));
  (*store)->Put(MakeSnapshot({1, 2, 9, 9, 9}));
  EXPECT_EQ((*store)->BestPrefix({1, 2, 3, 4}, ""), 3u);
  EXPECT_EQ((*store)->BestPrefix({1, 2, 9, 9, 9, 1}, ""), 5u);
  EXPECT_EQ((*store)->BestPrefix({1, 2, 3}, ""), 2u);  // the last prompt token is recomputed
  EXPECT_EQ((*store)->BestPrefix({7}, ""), 0u);
  auto taken = (*store)->TakeBest({1, 2, 3, 4}, "");
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ((*store)->stats().ram_entries, 1u);
  EXPECT_EQ((*store)->BestPrefix({1, 2, 3, 4}, ""), 2u);  // only {1, 2, 9, 9, 9} is left
}

TEST_F(KvStoreTest, ASharedStartGetsACopyAndTheConversationStays) {
  for (bool disk : {false, true}) {
    auto store = KvStore::Open(Options(disk ? 0 : 1 << 20, disk));
    ASSERT_TRUE(store.ok());
    const KvSnapshot full = MakeSnapshot({1, 2, 3, 4, 5, 6});
    (*store)->Put(full);
    (*store)->Flush();
    // Another conversation with the same first three tokens.
    auto prefix = (*store)->TakeBest({1, 2, 3, 9, 9}, "");
    ASSERT_TRUE(prefix.has_value()) << disk;
    EXPECT_EQ(prefix->tokens, (std::vector<int32_t>{1, 2, 3}));
    for (int64_t l = 0; l < 2; ++l) {
      for (int side = 0; side < 2; ++side) {
        EXPECT_EQ(std::memcmp(prefix->Row(l, side, 0), full.Row(l, side, 0), 3 * full.RowBytes()), 0);
      }
    }
    EXPECT_EQ((*store)->stats().ram_entries + (*store)->stats().disk_entries, 1u) << disk;
    // The conversation itself still finds all of it.
    EXPECT_EQ((*store)->BestPrefix({1, 2, 3, 4, 5, 6, 7}, ""), 6u);
    auto whole = (*store)->TakeBest({1, 2, 3, 4, 5, 6, 7}, "");
    ASSERT_TRUE(whole.has_value());
    EXPECT_EQ(whole->rows, full.rows);
    EXPECT_EQ((*store)->stats().ram_entries + (*store)->stats().disk_entries, 0u);
    EXPECT_EQ((*store)->stats().ram_bytes, 0u);
    (*store)->Flush();
    fs::remove_all(dir_);
  }
}

TEST_F(KvStoreTest, ANewerHistoryReplacesItsPrefix) {
  auto store = KvStore::Open(Options(1 << 20, false));
  ASSERT_TRUE(store.ok());
  (*store)->Put(MakeSnapshot({1, 2}));
  (*store)->Put(MakeSnapshot({1, 2, 3, 4}));
  EXPECT_EQ((*store)->stats().ram_entries, 1u);
}

TEST_F(KvStoreTest, RamLimitSpillsToDiskOrDrops) {
  const uint64_t one = MakeSnapshot({1, 2, 3, 4}).bytes();
  {
    auto store = KvStore::Open(Options(one * 2, false));
    ASSERT_TRUE(store.ok());
    for (int32_t i = 0; i < 4; ++i) (*store)->Put(MakeSnapshot({10 + i, 2, 3, 4}));
    const KvStoreStats st = (*store)->stats();
    EXPECT_EQ(st.ram_entries, 2u);
    EXPECT_LE(st.ram_bytes, one * 2);
    EXPECT_EQ(st.dropped, 2u);
    // The two most recent survive.
    EXPECT_EQ((*store)->BestPrefix({13, 2, 3, 4, 5}, ""), 4u);
    EXPECT_EQ((*store)->BestPrefix({10, 2, 3, 4, 5}, ""), 0u);
  }
  auto store = KvStore::Open(Options(one, true));
  ASSERT_TRUE(store.ok());
  for (int32_t i = 0; i < 3; ++i) (*store)->Put(MakeSnapshot({20 + i, 2, 3, 4}));
  (*store)->Flush();  // spills are written by the store's writer thread
  KvStoreStats st = (*store)->stats();
  EXPECT_EQ(st.ram_entries, 1u);
  EXPECT_EQ(st.disk_entries, 2u);
  EXPECT_EQ(st.dropped, 0u);
  auto from_disk = (*store)->TakeBest({20, 2, 3, 4, 5}, "");
  ASSERT_TRUE(from_disk.has_value());
  EXPECT_EQ(from_disk->rows, MakeSnapshot({20, 2, 3, 4}).rows);
  EXPECT_EQ((*store)->stats().disk_entries, 1u);
  ASSERT_TRUE((*store)->PersistAll().ok());
  EXPECT_EQ((*store)->stats().ram_entries, 0u);
  EXPECT_EQ((*store)->stats().disk_entries, 2u);
}

TEST_F(KvStoreTest, DiskLimitDeletesTheOldestFiles) {
  const uint64_t file = KvStore::Encode(MakeSnapshot({1, 2, 3, 4}), "fp").size();
  KvStoreOptions o = Options(0, true);
  o.disk_limit = 2 * file + file / 2;
  {
    auto store = KvStore::Open(o);
    ASSERT_TRUE(store.ok());
    for (int32_t i = 0; i < 4; ++i) (*store)->Put(MakeSnapshot({30 + i, 2, 3, 4}));
    (*store)->Flush();
    EXPECT_EQ((*store)->stats().disk_entries, 2u);
    EXPECT_EQ((*store)->stats().dropped, 2u);
    EXPECT_EQ((*store)->BestPrefix({33, 2, 3, 4, 5}, ""), 4u);  // the newest two stay
    EXPECT_EQ((*store)->BestPrefix({30, 2, 3, 4, 5}, ""), 0u);
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 2);
  // Reopened with a smaller cap: trimmed at start-up.
  o.disk_limit = file;
  auto store = KvStore::Open(o);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->stats().disk_entries, 1u);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(KvStoreTest, IndexSkipsOddFilesAndCachesLongerThanTheContext) {
  {
    auto store = KvStore::Open(Options(0, true));
    ASSERT_TRUE(store.ok());
    (*store)->Put(MakeSnapshot({1, 2, 3, 4}));
    (*store)->Put(MakeSnapshot({5, 6, 7, 8, 9, 10, 11, 12}));
    (*store)->Flush();
  }
  // Things a shared directory may hold: the user's files, a directory named like a temp file,
  // and an interrupted write of ours.
  { std::ofstream(dir_ / "notes.txt") << "keep me"; }
  fs::create_directories(dir_ / "a.kv.123.tmp" / "inside");
  { std::ofstream(dir_ / "0123.kv.456.tmp") << "partial"; }
  KvStoreOptions o = Options(0, true);
  o.context_length = 6;  // the 8-token cache no longer fits
  auto store = KvStore::Open(o);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->stats().disk_entries, 1u);
  EXPECT_EQ((*store)->stats().load_errors, 1u);
  EXPECT_EQ((*store)->BestPrefix({1, 2, 3, 4, 5}, ""), 4u);
  EXPECT_TRUE(fs::exists(dir_ / "notes.txt"));
  EXPECT_TRUE(fs::exists(dir_ / "a.kv.123.tmp" / "inside"));
  EXPECT_FALSE(fs::exists(dir_ / "0123.kv.456.tmp"));
}

TEST_F(KvStoreTest, EightBitOnlyWhenAskedAndTheShapeAllows) {
  KvStoreOptions o = Options(1 << 20, false);
  auto f32 = KvStore::Open(o);
  ASSERT_TRUE(f32.ok());
  EXPECT_EQ((*f32)->snapshot_dtype(), quant::DType::kF32);
  o.eight_bit = true;
  auto q8 = KvStore::Open(o);
  ASSERT_TRUE(q8.ok());
  EXPECT_EQ((*q8)->snapshot_dtype(), quant::DType::kQ8_0);
  o.kv_dim = 48;
  auto odd = KvStore::Open(o);
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ((*odd)->snapshot_dtype(), quant::DType::kF32);
  o.kv_dim = 0;
  EXPECT_EQ(KvStore::Open(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(KvStoreTest, PutNeverWaitsForTheDiskAndTakingDuringAWriteIsSafe) {
  // Many spills in flight while entries are taken back and replaced: accounting stays exact.
  auto store = KvStore::Open(Options(0, true));
  ASSERT_TRUE(store.ok());
  for (int32_t i = 0; i < 50; ++i) {
    (*store)->Put(MakeSnapshot({100 + i, 2, 3, 4}));
    if (i % 3 == 0) {
      auto taken = (*store)->TakeBest({100 + i, 2, 3, 4, 5}, "");
      ASSERT_TRUE(taken.has_value()) << i;
      EXPECT_EQ(taken->rows, MakeSnapshot({100 + i, 2, 3, 4}).rows);
    }
  }
  (*store)->Flush();
  const KvStoreStats st = (*store)->stats();
  EXPECT_EQ(st.ram_bytes, 0u);
  EXPECT_EQ(st.ram_entries, 0u);
  EXPECT_EQ(st.disk_entries, 50u - 17u);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 33);
}

}  // namespace
}  // namespace colibri::engine
