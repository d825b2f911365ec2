#include "colibri/store/block_store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "colibri/core/checksum.h"
#include "colibri/core/file_util.h"
#include "colibri/core/testing/wait.h"
#include "colibri/expert_source/cache_tier.h"
#include "colibri/store/disk_set.h"
#include "colibri/store/ingest.h"
#include "colibri/store/striped_source.h"
#include "store_test_util.h"

namespace colibri::store {
namespace {

namespace fs = std::filesystem;
using expert_source::ExpertId;
using expert_source::Lease;
using expert_source::Priority;
using testing::ScratchDir;

constexpr uint64_t kStripe = 8192;  // blocks are 20 KiB: units of 8K, 8K, 4K

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_dir_ = dir_.path() / "model dir";
    testing::WriteTinyModel(model_dir_, "tiny");
    auto c = model::Container::Open(model_dir_);
    ASSERT_TRUE(c.ok());
    container_ = std::move(*c);
    for (int i = 0; i < 3; ++i) disks_.push_back(dir_.path() / ("disk" + std::to_string(i)));
  }

  StoreLocation Location() const { return StoreLocation{disks_, {}}; }

  ImportResult Import(ImportOptions o = {}) {
    o.stripe_size = o.stripe_size == kDefaultStripeSize ? kStripe : o.stripe_size;
    auto r = ImportModel(model_dir_, Location(), o);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : ImportResult{};
  }

  std::unique_ptr<BlockStore> OpenStore(BlockStoreOptions o = {}) {
    if (o.disks.empty()) o.disks = disks_;
    auto s = BlockStore::Open(o);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }

  void ExpectBlock(const Lease& lease, int64_t layer, int64_t expert) {
    ASSERT_NE(lease, nullptr);
    auto want = container_->ReadExpertBlock(layer, expert);
    ASSERT_TRUE(want.ok());
    const auto& b = container_->manifest().Expert(layer, expert);
    ASSERT_EQ(lease->size, b.size);
    EXPECT_EQ(std::memcmp(lease->data(), want->get(), b.size), 0)
        << "layer " << layer << " expert " << expert;
  }

  // The stripe file of `disk` and the file offset of unit `k` of (layer, expert).
  std::pair<fs::path, uint64_t> UnitOf(const BlockStore& store, int32_t layer, int32_t expert,
                                       size_t k) {
    const BlockRecord* b = store.FindModel("tiny")->Find({layer, expert});
    const Extent& e = b->extents[k];
    return {StripeFilePath(disks_[e.disk], "tiny"), e.offset};
  }

  ScratchDir dir_{"colibri_block_store_test"};
  fs::path model_dir_;
  std::unique_ptr<model::Container> container_;
  std::vector<fs::path> disks_;
};

TEST_F(StoreTest, ImportThenServeEveryBlockStriped) {
  const ImportResult r = Import();
  EXPECT_EQ(r.name, "tiny");
  EXPECT_EQ(r.blocks_total, 8u);
  EXPECT_EQ(r.blocks_written, 8u);
  EXPECT_EQ(r.blocks_resumed, 0u);
  // Every disk got stripes: 8 blocks x 3 units dealt over 3 disks.
  uint64_t striped = 0;
  for (const auto& d : disks_) {
    EXPECT_TRUE(fs::exists(d / kDiskIdentityFile));
    EXPECT_GE(fs::file_size(StripeFilePath(d, "tiny")), 32768u);
    striped += fs::file_size(StripeFilePath(d, "tiny"));
  }
  EXPECT_EQ(striped, 8u * 20480);
  EXPECT_TRUE(fs::exists(disks_[0] / kCatalogDirName / "CURRENT"));

  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(store->models().size(), 1u);
  const StoredModel& m = *store->models()[0];
  EXPECT_EQ(m.name(), "tiny");
  EXPECT_TRUE(m.full_copy());
  EXPECT_EQ(m.stripe_size(), kStripe);
  EXPECT_EQ(m.total_expert_bytes(), container_->manifest().TotalExpertBytes());
  const BlockRecord* b = m.Find({1, 2});
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(b->extents.size(), 3u);
  EXPECT_EQ(b->quant, (std::vector<std::string>{"q8_0", "q8_0", "f32"}));
  std::set<uint32_t> disks;
  for (const auto& e : b->extents) disks.insert(e.disk);
  EXPECT_EQ(disks.size(), 3u);  // one expert read uses every disk

  auto src = StripedSource::Create(store.get(), "tiny");
  ASSERT_TRUE(src.ok());
  std::vector<ExpertId> ids;
  for (int32_t l = 0; l < 2; ++l)
    for (int32_t e = 0; e < 4; ++e) ids.push_back({l, e});
  std::vector<int> calls(ids.size());
  ASSERT_TRUE((*src)
                  ->FetchMany(ids,
                              [&](size_t i, Lease lease) {
                                calls[i]++;
                                ExpectBlock(lease, ids[i].layer, ids[i].expert);
                                EXPECT_EQ(reinterpret_cast<uintptr_t>(lease->data()) % 4096, 0u);
                              })
                  .ok());
  EXPECT_EQ(calls, std::vector<int>(8, 1));
  uint64_t bytes = 0;
  for (uint32_t d = 0; d < 3; ++d) bytes += store->io().Stats(d).bytes;
  EXPECT_EQ(bytes, 8u * 20480);
  EXPECT_EQ((*src)->BlockSize({0, 0}), 20480u);
  EXPECT_EQ((*src)->BlockSize({5, 0}), 0u);
  auto missing = (*src)->Fetch({0, 9}, Priority::kDemand);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("layer 0, id 9"), std::string::npos);
}

TEST_F(StoreTest, DisksMayBeGivenInAnyOrder) {
  Import();
  std::vector<fs::path> reversed(disks_.rbegin(), disks_.rend());
  BlockStoreOptions o;
  o.disks = reversed;
  auto store = OpenStore(o);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->disk_name(0), disks_[0].string());
  auto src = StripedSource::Create(store.get(), "tiny");
  auto lease = (*src)->Fetch({1, 3}, Priority::kDemand);
  ASSERT_TRUE(lease.ok()) << lease.status();
  ExpectBlock(*lease, 1, 3);
}

// Reads bytes [begin, end) of (1, 2) with ReadRange.
absl::StatusOr<SharedBlock> ReadPart(BlockStore& store, uint64_t begin, uint64_t end) {
  const StoredModel* m = store.FindModel("tiny");
  const BlockRecord* b = m->Find({1, 2});
  std::promise<absl::StatusOr<SharedBlock>> done;
  auto got = done.get_future();
  store.ReadRange(*m, *b, begin, end, Priority::kDemand,
                  [&done](absl::StatusOr<SharedBlock> r) { done.set_value(std::move(r)); });
  return got.get();
}

TEST_F(StoreTest, ReadRangeReadsOnlyTheUnitsOrPagesCoveringIt) {
  auto want = container_->ReadExpertBlock(1, 2);
  ASSERT_TRUE(want.ok());
  const uint64_t size = container_->manifest().Expert(1, 2).size;
  auto same = [&](const SharedBlock& b, uint64_t begin, uint64_t end) {
    return b->offset <= begin &&
           std::memcmp(b->data() + (begin - b->offset), want->get() + begin, end - begin) == 0;
  };
  // Striped (units of 8K, 8K, 4K): the units the range touches, each verified.
  Import();
  auto striped = OpenStore();
  {
    auto part = ReadPart(*striped, 9000, 10000);
    ASSERT_TRUE(part.ok()) << part.status();
    EXPECT_EQ((*part)->offset, kStripe);  // unit 1 only
    EXPECT_TRUE(same(*part, 9000, 10000));
    auto whole = ReadPart(*striped, 0, size);
    ASSERT_TRUE(whole.ok()) << whole.status();
    EXPECT_EQ((*whole)->offset, 0u);
    EXPECT_TRUE(same(*whole, 0, size));
  }
  auto [file, offset] = UnitOf(*striped, 1, 2, 0);
  striped.reset();
  testing::FlipByteAt(file, offset + 100);
  striped = OpenStore();
  EXPECT_TRUE(ReadPart(*striped, 9000, 10000).ok());  // unit 0 is never read
  EXPECT_EQ(ReadPart(*striped, 100, 9000).status().code(), absl::StatusCode::kDataLoss);

  // A plain model directory: the pages of the range, unverified (the block checksum needs
  // every byte; the client checks the assembled block).
  const fs::path plain = dir_.path() / "plain";
  testing::CopyWithFlippedExpertByte(model_dir_, plain, container_->manifest(), 1, 2, 100);
  BlockStoreOptions o;
  o.model_dirs = {plain};
  auto opened = BlockStore::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  BlockStore& dir_store = **opened;
  auto part = ReadPart(dir_store, 9000, 10000);
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_EQ((*part)->offset, 8192u);  // from page 2
  EXPECT_TRUE(same(*part, 9000, 10000));
  auto first_page = ReadPart(dir_store, 0, 4096);
  ASSERT_TRUE(first_page.ok()) << first_page.status();
  EXPECT_FALSE(same(*first_page, 0, 4096));  // the flipped byte is handed on, unverified
  EXPECT_EQ(ReadPart(dir_store, 0, size).status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(StoreTest, CorruptStripeIsDataLossNamingStripeAndDisk) {
  Import();
  auto store = OpenStore();
  auto [file, offset] = UnitOf(*store, 1, 2, 1);
  store.reset();
  testing::FlipByteAt(file, offset + 100);
  store = OpenStore();
  auto src = StripedSource::Create(store.get(), "tiny");
  auto r = (*src)->Fetch({1, 2}, Priority::kDemand);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  const std::string msg(r.status().message());
  EXPECT_NE(msg.find("expert (layer 1, id 2) of model 'tiny'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("stripe 1 of 3"), std::string::npos) << msg;
  const uint32_t disk = store->FindModel("tiny")->Find({1, 2})->extents[1].disk;
  EXPECT_NE(msg.find("on disk '" + disks_[disk].string() + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("checksum mismatch"), std::string::npos) << msg;
  EXPECT_EQ(store->checksum_failures(disk), 1u);
  // Neighbours are fine.
  auto ok = (*src)->Fetch({1, 1}, Priority::kDemand);
  ASSERT_TRUE(ok.ok());
  ExpectBlock(*ok, 1, 1);
}

TEST_F(StoreTest, InjectedFaultsReachTheCaller) {
  Import();
  FaultInjector faults;
  BlockStoreOptions o;
  o.io.faults = &faults;
  auto store = OpenStore(o);
  auto src = StripedSource::Create(store.get(), "tiny");
  // A corrupted read (the bytes on disk are fine) is caught; the retry reads good bytes.
  faults.AddRule({FaultKind::kCorrupt, 2, 0, UINT64_MAX, 1});
  auto bad = (*src)->Fetch({0, 0}, Priority::kDemand);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss) << bad.status();
  EXPECT_NE(bad.status().message().find(disks_[2].string()), std::string::npos) << bad.status();
  auto good = (*src)->Fetch({0, 0}, Priority::kDemand);
  ASSERT_TRUE(good.ok()) << good.status();
  ExpectBlock(*good, 0, 0);
  // EIO names the expert, the stripe and the disk.
  faults.AddRule({FaultKind::kEio, 1, 0, UINT64_MAX, 1});
  auto eio = (*src)->Fetch({0, 1}, Priority::kDemand);
  ASSERT_FALSE(eio.ok());
  EXPECT_NE(eio.status().message().find("expert (layer 0, id 1)"), std::string::npos)
      << eio.status();
  EXPECT_NE(eio.status().message().find(disks_[1].string()), std::string::npos) << eio.status();
  // Short reads are continued transparently.
  faults.AddRule({FaultKind::kShortRead, -1, 0, UINT64_MAX, -1});
  auto shortr = (*src)->Fetch({1, 0}, Priority::kDemand);
  ASSERT_TRUE(shortr.ok()) << shortr.status();
  ExpectBlock(*shortr, 1, 0);
  EXPECT_GT(faults.fired(FaultKind::kShortRead), 0u);
}

TEST_F(StoreTest, StartupNamesAMissingDiskAndAMissingFile) {
  Import();
  BlockStoreOptions o;
  o.disks = {disks_[0], disks_[2]};
  auto s = BlockStore::Open(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.status().message().find("disk 1 of 3"), std::string::npos) << s.status();
  EXPECT_NE(s.status().message().find(fs::absolute(disks_[1]).string()), std::string::npos)
      << s.status();

  fs::remove(StripeFilePath(disks_[2], "tiny"));
  s = BlockStore::Open(BlockStoreOptions{disks_});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(StripeFilePath(disks_[2], "tiny").string()),
            std::string::npos)
      << s.status();
  EXPECT_NE(s.status().message().find("missing"), std::string::npos) << s.status();
}

TEST_F(StoreTest, StartupNamesATruncatedFileAndAForeignDisk) {
  Import();
  fs::resize_file(StripeFilePath(disks_[1], "tiny"), 4096);
  auto s = BlockStore::Open(BlockStoreOptions{disks_});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.status().message().find("truncated"), std::string::npos) << s.status();

  const fs::path foreign = dir_.path() / "foreign";
  fs::create_directories(foreign);
  ASSERT_TRUE(WriteDiskIdentity(foreign, DiskIdentity{"other-store", "x", 0, 1}).ok());
  s = BlockStore::Open(BlockStoreOptions{{disks_[0], disks_[1], foreign}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("belongs to store other-store"), std::string::npos)
      << s.status();
  auto none = BlockStore::Open(BlockStoreOptions{{dir_.path() / "empty"}});
  EXPECT_FALSE(none.ok());
}

TEST_F(StoreTest, InterruptedImportIsInvisibleThenResumes) {
  ImportOptions o;
  o.stripe_size = kStripe;
  o.stop_after_blocks = 3;
  auto first = ImportModel(model_dir_, Location(), o);
  ASSERT_EQ(first.status().code(), absl::StatusCode::kAborted) << first.status();
  {
    auto listed = ListModels(Location());
    ASSERT_TRUE(listed.ok()) << listed.status();
    ASSERT_EQ(listed->size(), 1u);
    EXPECT_EQ((*listed)[0].record.state, ModelState::kIngesting);
    EXPECT_EQ((*listed)[0].blocks_committed, 3u);
    auto store = OpenStore();  // a half model is never served
    ASSERT_NE(store, nullptr);
    EXPECT_TRUE(store->models().empty());
    ASSERT_EQ(store->skipped().size(), 1u);
    EXPECT_NE(store->skipped()[0].find("ingesting"), std::string::npos);
  }
  // Different parameters are refused rather than mixed in.
  ImportOptions other;
  other.stripe_size = 4096;
  auto mixed = ImportModel(model_dir_, Location(), other);
  EXPECT_EQ(mixed.status().code(), absl::StatusCode::kFailedPrecondition) << mixed.status();

  o.stop_after_blocks = -1;
  auto second = ImportModel(model_dir_, Location(), o);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->blocks_resumed, 3u);
  EXPECT_EQ(second->blocks_written, 5u);
  auto store = OpenStore();
  ASSERT_EQ(store->models().size(), 1u);
  auto src = StripedSource::Create(store.get(), "tiny");
  for (int32_t l = 0; l < 2; ++l) {
    for (int32_t e = 0; e < 4; ++e) {
      auto lease = (*src)->Fetch({l, e}, Priority::kDemand);
      ASSERT_TRUE(lease.ok()) << lease.status();
      ExpectBlock(*lease, l, e);
    }
  }
  // Importing a ready model again is refused.
  EXPECT_EQ(ImportModel(model_dir_, Location(), o).status().code(),
            absl::StatusCode::kAlreadyExists);
}

TEST_F(StoreTest, ListAndRemove) {
  Import();
  ImportOptions o;
  o.stripe_size = kStripe;
  o.name = "tiny copy/2";
  o.first_layer = 1;
  o.last_layer = 1;
  auto r = ImportModel(model_dir_, Location(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->blocks_total, 4u);
  auto listed = ListModels(Location());
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].record.name, "tiny");
  EXPECT_TRUE((*listed)[0].record.full_copy());
  EXPECT_EQ((*listed)[1].record.name, "tiny copy/2");
  EXPECT_FALSE((*listed)[1].record.full_copy());
  {
    auto store = OpenStore();
    const StoredModel* part = store->FindModel("tiny copy/2");
    ASSERT_NE(part, nullptr);
    EXPECT_FALSE(part->full_copy());
    EXPECT_EQ(part->Find({0, 0}), nullptr);
    ASSERT_NE(part->Find({1, 0}), nullptr);
    auto not_held = store->FindBlock("tiny copy/2", {0, 1});
    EXPECT_EQ(not_held.status().code(), absl::StatusCode::kNotFound);
    EXPECT_NE(not_held.status().message().find("not held"), std::string::npos) << not_held.status();
  }
  ASSERT_TRUE(RemoveModel(Location(), "tiny").ok());
  EXPECT_FALSE(fs::exists(StripeFilePath(disks_[0], "tiny")));
  EXPECT_EQ(RemoveModel(Location(), "tiny").code(), absl::StatusCode::kNotFound);
  listed = ListModels(Location());
  ASSERT_EQ(listed->size(), 1u);
  auto store = OpenStore();
  ASSERT_EQ(store->models().size(), 1u);
  EXPECT_EQ(store->models()[0]->name(), "tiny copy/2");
}

TEST_F(StoreTest, ReadCacheServesRepeatsFromMemory) {
  Import();
  BlockStoreOptions o;
  o.read_cache_bytes = 3 * 20480;
  auto store = OpenStore(o);
  auto src = StripedSource::Create(store.get(), "tiny");
  for (int round = 0; round < 3; ++round) {
    for (int32_t e = 0; e < 2; ++e) {
      auto lease = (*src)->Fetch({0, e}, Priority::kDemand);
      ASSERT_TRUE(lease.ok());
      ExpectBlock(*lease, 0, e);
    }
  }
  auto stats = store->read_cache_stats();
  ASSERT_TRUE(stats.has_value());
  EXPECT_EQ(stats->misses, 2u);
  EXPECT_EQ(stats->hits, 4u);
  uint64_t bytes = 0;
  for (uint32_t d = 0; d < 3; ++d) bytes += store->io().Stats(d).bytes;
  EXPECT_EQ(bytes, 2u * 20480);
}

TEST_F(StoreTest, ServesPlainModelDirectoriesBeside) {
  BlockStoreOptions o;
  o.model_dirs = {model_dir_};
  o.io.pretend_direct_refused = true;  // the buffered fallback serves the same bytes
  auto s = BlockStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->disk_count(), 1u);
  EXPECT_FALSE((*s)->io().Stats(0).direct);
  auto src = StripedSource::Create(s->get(), "tiny");
  auto lease = (*src)->Fetch({1, 1}, Priority::kDemand);
  ASSERT_TRUE(lease.ok()) << lease.status();
  ExpectBlock(*lease, 1, 1);
  // A corrupt block in a model directory is still named.
  s->reset();
  const auto& b = container_->manifest().Expert(0, 2);
  testing::FlipByteAt(container_->ExpertFilePath(b), b.offset + 10);
  s = BlockStore::Open(o);
  src = StripedSource::Create(s->get(), "tiny");
  auto bad = (*src)->Fetch({0, 2}, Priority::kDemand);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("checksum mismatch"), std::string::npos);
}

// One read slot per disk and slow disks: a first demand read holds every disk while the
// reads after it queue.
class HeldStoreTest : public StoreTest {
 protected:
  void SetUp() override {
    StoreTest::SetUp();
    Import();
    for (uint32_t d = 0; d < 3; ++d) faults_.SetDiskBandwidth(d, rate_);
    BlockStoreOptions o;
    o.io.queue_depth = 1;
    o.io.faults = &faults_;
    store_ = OpenStore(o);
    ASSERT_NE(store_, nullptr);
    model_ = store_->FindModel("tiny");
    auto buf = AllocateAligned(8 * 20480);
    ASSERT_TRUE(buf.ok());
    buf_ = std::move(*buf);
    store_->ReadInto(*model_, *model_->Find({0, 0}), buf_.get(), Priority::kDemand, landed_.Add(0));
    for (uint32_t d = 0; d < 3; ++d) {
      colibri::testing::WaitUntil([&] { return store_->io().Stats(d).in_flight != 0; },
                                  std::chrono::seconds(10));
      ASSERT_EQ(store_->io().Stats(d).in_flight, 1u) << d;
    }
  }
  // ReadShared's callback, reporting to landed_.
  BlockStore::SharedDone Shared(int tag) {
    return [done = landed_.Add(tag)](absl::StatusOr<SharedBlock> b) { done(b.status()); };
  }
  uint8_t* Slot(int i) { return buf_.get() + i * 20480; }
  const BlockRecord& Block(int32_t expert) { return *model_->Find({0, expert}); }
  DiskStats Total() {
    DiskStats t;
    for (uint32_t d = 0; d < 3; ++d) {
      const DiskStats s = store_->io().Stats(d);
      t.reads += s.reads;
      t.cancelled += s.cancelled;
      t.errors += s.errors;
    }
    return t;
  }

  uint64_t rate_ = 1 << 20;  // bytes/s per disk: 8 KiB take ~8 ms
  FaultInjector faults_;
  std::unique_ptr<BlockStore> store_;
  const StoredModel* model_ = nullptr;
  AlignedBytes buf_;
  testing::Completions landed_;
};

TEST_F(HeldStoreTest, ACancelledQueuedReadNeverReachesTheDisks) {
  auto h1 = store_->ReadShared(*model_, Block(1), Priority::kPrefetch, Shared(1));
  auto h2 = store_->ReadInto(*model_, Block(2), Slot(2), Priority::kPrefetch, landed_.Add(2));
  store_->Cancel(h1);
  ASSERT_TRUE(landed_.Wait(3));
  EXPECT_EQ(landed_.order(), (std::vector<int>{1, 0, 2}));
  EXPECT_EQ(landed_.status(1).code(), absl::StatusCode::kCancelled) << landed_.status(1);
  EXPECT_NE(landed_.status(1).message().find("expert (layer 0, id 1)"), std::string::npos)
      << landed_.status(1);
  EXPECT_TRUE(landed_.status(2).ok()) << landed_.status(2);
  const DiskStats t = Total();
  EXPECT_EQ(t.cancelled, Block(1).extents.size());  // every stripe of block 1, none read
  EXPECT_EQ(t.reads, Block(0).extents.size() + Block(2).extents.size());
  EXPECT_EQ(t.errors, 0u);
  // A later read of the cancelled block starts afresh.
  store_->ReadShared(*model_, Block(1), Priority::kDemand, Shared(3));
  ASSERT_TRUE(landed_.Wait(4));
  EXPECT_TRUE(landed_.status(3).ok()) << landed_.status(3);
  store_->Cancel(h2);  // finished: nothing happens
  EXPECT_EQ(Total().cancelled, Block(1).extents.size());
}

TEST_F(HeldStoreTest, AReadOthersWaitForIsNotCancelled) {
  auto h1 = store_->ReadShared(*model_, Block(1), Priority::kPrefetch, Shared(1));
  auto h2 = store_->ReadShared(*model_, Block(1), Priority::kPrefetch, Shared(2));
  EXPECT_EQ(h1, h2);  // coalesced
  store_->Cancel(h1);
  ASSERT_TRUE(landed_.Wait(3));
  EXPECT_TRUE(landed_.status(1).ok()) << landed_.status(1);
  EXPECT_TRUE(landed_.status(2).ok()) << landed_.status(2);
  EXPECT_EQ(Total().cancelled, 0u);
}

TEST_F(HeldStoreTest, APromotedReadGoesBeforeQueuedPrefetches) {
  store_->ReadInto(*model_, Block(1), Slot(1), Priority::kPrefetch, landed_.Add(1));
  store_->ReadInto(*model_, Block(2), Slot(2), Priority::kPrefetch, landed_.Add(2));
  auto h3 = store_->ReadInto(*model_, Block(3), Slot(3), Priority::kPrefetch, landed_.Add(3));
  store_->Promote(h3);
  ASSERT_TRUE(landed_.Wait(4));
  EXPECT_EQ(landed_.order(), (std::vector<int>{0, 3, 1, 2}));
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(landed_.status(i).ok()) << landed_.status(i);
  for (int32_t e = 1; e < 4; ++e) {
    auto want = container_->ReadExpertBlock(0, e);
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(std::memcmp(Slot(e), want->get(), Block(e).size), 0) << e;
  }
}

// Slower disks, for reads started on another thread: they must all be queued before the first
// read lands.
class SlowHeldStoreTest : public HeldStoreTest {
 protected:
  SlowHeldStoreTest() { rate_ = 64 << 10; }  // 4 KiB take ~60 ms
};

// A FetchMany of the striped source on a thread of its own, recording what it handed out.
class BackgroundFetch {
 public:
  BackgroundFetch(StripedSource* src, std::vector<ExpertId> ids, Priority priority)
      : ids_(std::move(ids)), thread_([this, src, priority] {
          status_ = src->FetchMany(
              ids_,
              [this](size_t i, Lease lease) {
                std::lock_guard<std::mutex> lock(mu_);
                handed_.push_back(i);
                leases_[i] = std::move(lease);
              },
              priority);
        }) {}
  ~BackgroundFetch() { Join().IgnoreError(); }
  absl::Status Join() {
    if (thread_.joinable()) thread_.join();
    return status_;
  }
  std::vector<size_t> handed() {
    std::lock_guard<std::mutex> lock(mu_);
    return handed_;
  }
  Lease lease(size_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    return leases_[i];
  }

 private:
  std::vector<ExpertId> ids_;
  std::mutex mu_;
  std::vector<size_t> handed_;      // mu_
  std::map<size_t, Lease> leases_;  // mu_
  absl::Status status_;             // set by the thread
  std::thread thread_;
};

// Reads waiting in the disks' queues, over all disks.
uint64_t Queued(BlockStore& store) {
  uint64_t n = 0;
  for (uint32_t d = 0; d < store.disk_count(); ++d) n += store.io().Stats(d).queued;
  return n;
}

TEST_F(SlowHeldStoreTest, StripedSourceCancelSkipsACancelledPrefetch) {
  auto src = StripedSource::Create(store_.get(), "tiny");
  ASSERT_TRUE(src.ok()) << src.status();
  BackgroundFetch fetch(src->get(), {{0, 1}, {0, 2}}, Priority::kPrefetch);
  ASSERT_TRUE(colibri::testing::WaitUntil(
      [&] { return Queued(*store_) == Block(1).extents.size() + Block(2).extents.size(); }));
  const ExpertId cancel{0, 1};
  (*src)->Cancel(std::span<const ExpertId>(&cancel, 1));
  const absl::Status st = fetch.Join();
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled) << st;
  EXPECT_NE(st.message().find("expert (layer 0, id 1)"), std::string::npos) << st;
  EXPECT_EQ(fetch.handed(), (std::vector<size_t>{1}));  // the other block still handed out
  ExpectBlock(fetch.lease(1), 0, 2);
  ASSERT_TRUE(landed_.Wait(1));
  const DiskStats t = Total();
  EXPECT_EQ(t.cancelled, Block(1).extents.size());  // block 1 never reached the disks
  EXPECT_EQ(t.reads, Block(0).extents.size() + Block(2).extents.size());
}

TEST_F(SlowHeldStoreTest, StripedSourcePromoteMovesAPrefetchAheadOfQueuedOnes) {
  auto src = StripedSource::Create(store_.get(), "tiny");
  ASSERT_TRUE(src.ok()) << src.status();
  BackgroundFetch fetch(src->get(), {{0, 1}, {0, 2}, {0, 3}}, Priority::kPrefetch);
  ASSERT_TRUE(colibri::testing::WaitUntil([&] {
    return Queued(*store_) ==
           Block(1).extents.size() + Block(2).extents.size() + Block(3).extents.size();
  }));
  const ExpertId promote{0, 3};
  (*src)->Promote(std::span<const ExpertId>(&promote, 1));
  (*src)->Cancel(std::span<const ExpertId>(&promote, 1));  // wanted by a demand now: kept
  ASSERT_TRUE(fetch.Join().ok());
  EXPECT_EQ(fetch.handed(), (std::vector<size_t>{2, 0, 1}));
  for (size_t i = 0; i < 3; ++i) ExpectBlock(fetch.lease(i), 0, static_cast<int64_t>(i) + 1);
  EXPECT_EQ(Total().cancelled, 0u);
}

// A cancelled prefetch returns at once, also when its read is already at the device.
TEST_F(StoreTest, StripedSourceCancelReturnsBeforeTheReadLands) {
  Import();
  FaultInjector faults;
  for (uint32_t d = 0; d < 3; ++d) faults.SetDiskBandwidth(d, 16 << 10);  // 8 KiB: 500 ms
  BlockStoreOptions o;
  o.io.queue_depth = 1;
  o.io.faults = &faults;
  auto store = OpenStore(o);
  ASSERT_NE(store, nullptr);
  auto src = StripedSource::Create(store.get(), "tiny");
  ASSERT_TRUE(src.ok()) << src.status();
  const std::vector<ExpertId> ids = {{0, 0}, {0, 1}};
  BackgroundFetch fetch(src->get(), ids, Priority::kPrefetch);
  ASSERT_TRUE(colibri::testing::WaitUntil([&] {
    for (uint32_t d = 0; d < 3; ++d) {
      const DiskStats s = store->io().Stats(d);
      if (s.in_flight != 1 || s.queued != 1) return false;
    }
    return true;
  }));
  const auto start = std::chrono::steady_clock::now();
  (*src)->Cancel(ids);
  const absl::Status st = fetch.Join();
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled) << st;
  EXPECT_TRUE(fetch.handed().empty());
  EXPECT_LT(took, std::chrono::milliseconds(100));  // block 0's stripes take >= 250 ms
  // Block 1's stripes never reach the disks (the engine counts them on its threads).
  const uint64_t want = store->FindModel("tiny")->Find({0, 1})->extents.size();
  uint64_t cancelled = 0;
  EXPECT_TRUE(colibri::testing::WaitUntil([&] {
    cancelled = 0;
    for (uint32_t d = 0; d < 3; ++d) cancelled += store->io().Stats(d).cancelled;
    return cancelled >= want;
  }));
  EXPECT_EQ(cancelled, want);
}

TEST_F(StoreTest, CacheTierInFrontOfTheStripedSource) {
  Import();
  auto store = OpenStore();
  auto src = StripedSource::Create(store.get(), "tiny");
  expert_source::CacheTier cache(src->get(), 1 << 20);
  for (int round = 0; round < 2; ++round) {
    auto lease = cache.Fetch({1, 3}, Priority::kDemand);
    ASSERT_TRUE(lease.ok()) << lease.status();
    ExpectBlock(*lease, 1, 3);
  }
  EXPECT_EQ(cache.Stats().hits, 1u);
}

}  // namespace
}  // namespace colibri::store
