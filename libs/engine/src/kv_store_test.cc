#include "colibri/engine/kv_store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <numeric>
#include <vector>

#include "colibri/core/testing/small_tmpfs.h"

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
  EXPECT_EQ(KvStore::Decode(bytes, "other", "mem").status().code(),
            absl::StatusCode::kFailedPrecondition);
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
        EXPECT_EQ(std::memcmp(prefix->Row(l, side, 0), full.Row(l, side, 0), 3 * full.RowBytes()),
                  0);
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

TEST_F(KvStoreTest, AtStartUpTheDiskLimitDeletesTheOldestModifiedFilesFirst) {
  const uint64_t file = KvStore::Encode(MakeSnapshot({1, 2, 3, 4}), "fp").size();
  {
    auto store = KvStore::Open(Options(0, true));
    ASSERT_TRUE(store.ok());
    for (int32_t i = 0; i < 3; ++i) (*store)->Put(MakeSnapshot({40 + i, 2, 3, 4}));
    (*store)->Flush();
  }
  // Ages against the order of names and of writing: 41 newest, then 40, then 42 oldest.
  const auto now = fs::file_time_type::clock::now();
  const std::vector<std::pair<int32_t, int>> age_hours = {{41, 1}, {40, 2}, {42, 3}};
  for (const auto& entry : fs::directory_iterator(dir_)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto s = KvStore::Decode(bytes, "fp", entry.path().string());
    ASSERT_TRUE(s.ok()) << s.status();
    for (const auto& [first, hours] : age_hours) {
      if (s->tokens[0] == first) fs::last_write_time(entry.path(), now - std::chrono::hours(hours));
    }
  }
  KvStoreOptions o = Options(0, true);
  o.disk_limit = 2 * file;
  {
    auto store = KvStore::Open(o);
    ASSERT_TRUE(store.ok());
    EXPECT_EQ((*store)->stats().disk_entries, 2u);
    EXPECT_EQ((*store)->BestPrefix({41, 2, 3, 4, 5}, ""), 4u);
    EXPECT_EQ((*store)->BestPrefix({40, 2, 3, 4, 5}, ""), 4u);
    EXPECT_EQ((*store)->BestPrefix({42, 2, 3, 4, 5}, ""), 0u);  // the oldest went
  }
  o.disk_limit = file;
  auto store = KvStore::Open(o);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->stats().disk_entries, 1u);
  EXPECT_EQ((*store)->BestPrefix({41, 2, 3, 4, 5}, ""), 4u);  // only the newest survives
  EXPECT_EQ((*store)->BestPrefix({40, 2, 3, 4, 5}, ""), 0u);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

// A new file's id (its name is "<hash>-<id>.kv") is above every id on disk, so it can never take
// the name of a reloaded file whose deletion is still pending (the same history, put again).
TEST_F(KvStoreTest, NewFilesTakeIdsAboveEveryFileOnDisk) {
  auto ids_on_disk = [&] {
    std::vector<uint64_t> ids;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      const std::string stem = entry.path().stem().string();
      ids.push_back(std::stoull(stem.substr(stem.rfind('-') + 1)));
    }
    std::sort(ids.begin(), ids.end());
    return ids;
  };
  {
    auto store = KvStore::Open(Options(0, true));
    ASSERT_TRUE(store.ok());
    for (int32_t i = 0; i < 4; ++i) (*store)->Put(MakeSnapshot({50 + i, 2, 3, 4}));
    (*store)->Flush();
  }
  ASSERT_EQ(ids_on_disk(), (std::vector<uint64_t>{1, 2, 3, 4}));
  // The two oldest go (as a disk limit would have taken them): ids 3 and 4 stay.
  for (const auto& entry : fs::directory_iterator(dir_)) {
    const std::string stem = entry.path().stem().string();
    if (stem.ends_with("-1") || stem.ends_with("-2")) fs::remove(entry.path());
  }
  auto store = KvStore::Open(Options(0, true));
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->stats().disk_entries, 2u);
  (*store)->Put(MakeSnapshot({60, 2, 3, 4}));
  (*store)->Flush();
  const std::vector<uint64_t> ids = ids_on_disk();
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[0], 3u);
  EXPECT_EQ(ids[1], 4u);
  EXPECT_GT(ids[2], 4u);
}

TEST_F(KvStoreTest, FilesAreOwnerOnly) {
  auto store = KvStore::Open(Options(0, true));
  ASSERT_TRUE(store.ok());
  (*store)->Put(MakeSnapshot({1, 2, 3, 4}));
  (*store)->Put(MakeSnapshot({5, 6, 7, 8}));
  (*store)->Flush();
  ASSERT_TRUE((*store)->PersistAll().ok());
  struct stat st {};
  ASSERT_EQ(::stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    ASSERT_EQ(::stat(entry.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << entry.path();
    ++files;
  }
  EXPECT_EQ(files, 2);
}

TEST_F(KvStoreTest, AFullDiskDropsTheCacheAndLeavesNoTempFile) {
  auto tmpfs = colibri::testing::SmallTmpfs::Mount(64 << 10);
  if (!tmpfs.ok()) GTEST_SKIP() << tmpfs.status().message();
  std::vector<int32_t> tokens(100);
  std::iota(tokens.begin(), tokens.end(), 1);
  ASSERT_GT(KvStore::Encode(MakeSnapshot(tokens), "fp").size(), 32u << 10);  // two never fit
  KvStoreOptions o = Options(0, true);
  o.dir = (*tmpfs)->path() / "kv";
  auto store = KvStore::Open(o);
  ASSERT_TRUE(store.ok()) << store.status();
  (*store)->Put(MakeSnapshot(tokens));
  tokens[0] = 500;  // another conversation
  (*store)->Put(MakeSnapshot(tokens));
  (*store)->Flush();
  KvStoreStats st = (*store)->stats();
  EXPECT_EQ(st.disk_entries, 1u);
  EXPECT_EQ(st.dropped, 1u);
  EXPECT_EQ(st.ram_bytes, 0u);
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(o.dir))
    names.push_back(entry.path().filename().string());
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(fs::path(names[0]).extension(), ".kv") << names[0];
  // PersistAll on the full disk reports the failure and also cleans up.
  tokens[0] = 600;
  o.ram_limit = 1 << 20;
  auto ram_store = KvStore::Open(o);
  ASSERT_TRUE(ram_store.ok());
  (*ram_store)->Put(MakeSnapshot(tokens));
  absl::Status persisted = (*ram_store)->PersistAll();
  EXPECT_EQ(persisted.code(), absl::StatusCode::kResourceExhausted) << persisted;
  for (const auto& entry : fs::directory_iterator(o.dir)) {
    EXPECT_NE(entry.path().extension(), ".tmp") << entry.path();
  }
}

TEST_F(KvStoreTest, ADiskReadHoldsNoLock) {
  KvStoreOptions o = Options(0, true);
  KvStore* self = nullptr;
  bool others_ran = false;
  o.before_disk_read = [&](const fs::path&) {
    // Another thread uses the store while this one is about to read: it must not wait for us.
    auto other = std::async(std::launch::async, [&] {
      self->Put(MakeSnapshot({70, 71, 72}));
      return self->stats().offloaded;
    });
    others_ran = other.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  };
  auto store = KvStore::Open(o);
  ASSERT_TRUE(store.ok());
  self = store->get();
  (*store)->Put(MakeSnapshot({60, 61, 62, 63}));
  (*store)->Flush();
  auto taken = (*store)->TakeBest({60, 61, 62, 63, 64}, "");
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->rows, MakeSnapshot({60, 61, 62, 63}).rows);
  EXPECT_TRUE(others_ran);
  EXPECT_EQ((*store)->stats().offloaded, 2u);
}

TEST_F(KvStoreTest, DeletionsHoldNoLock) {
  const uint64_t file = KvStore::Encode(MakeSnapshot({1, 2, 3, 4}), "fp").size();
  KvStoreOptions o = Options(0, true);
  o.disk_limit = file + file / 2;  // one file
  KvStore* self = nullptr;
  std::mutex mu;
  std::vector<fs::path> removed;              // mu
  std::vector<std::future<uint64_t>> others;  // mu
  int unblocked = 0;                          // mu
  o.before_disk_remove = [&](const fs::path& path) {
    // Another thread uses the store while this one is about to delete: it must not wait for us.
    // (Kept, not waited for on exit: under a held lock that would never return.)
    auto other = std::async(std::launch::async, [&] { return self->stats().offloaded; });
    const bool ran = other.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
    std::lock_guard<std::mutex> lock(mu);
    removed.push_back(path);
    unblocked += ran ? 1 : 0;
    others.push_back(std::move(other));
  };
  auto store = KvStore::Open(o);
  ASSERT_TRUE(store.ok());
  self = store->get();
  auto files = [&] {
    std::vector<fs::path> found;
    for (const auto& entry : fs::directory_iterator(dir_)) found.push_back(entry.path());
    return found;
  };
  // The writer thread: the disk limit drops the older file.
  (*store)->Put(MakeSnapshot({1, 2, 3, 4}));
  (*store)->Flush();
  const std::vector<fs::path> a = files();
  ASSERT_EQ(a.size(), 1u);
  (*store)->Put(MakeSnapshot({5, 6, 7, 8}));
  (*store)->Flush();
  const std::vector<fs::path> b = files();
  ASSERT_EQ(b.size(), 1u);
  // Put: a longer history replaces the one on disk (then spilled itself).
  (*store)->Put(MakeSnapshot({5, 6, 7, 8, 9}));
  (*store)->Flush();
  const std::vector<fs::path> c = files();
  ASSERT_EQ(c.size(), 1u);
  // TakeBest: a shared start whose file turns out damaged drops it.
  fs::resize_file(c[0], fs::file_size(c[0]) - 1);
  EXPECT_FALSE((*store)->TakeBest({5, 6, 7, 1, 1}, "").has_value());
  EXPECT_TRUE(files().empty());
  std::lock_guard<std::mutex> lock(mu);
  for (auto& other : others) other.wait();
  EXPECT_EQ(removed, (std::vector<fs::path>{a[0], b[0], c[0]}));
  EXPECT_EQ(unblocked, 3);  // no deletion ran under the store's lock
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
