#include "colibri/store/io_engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "colibri/core/file_util.h"
#include "colibri/core/testing/wait.h"
#include "store_test_util.h"

namespace colibri::store {
namespace {

using expert_source::Priority;
using testing::Completions;
using testing::ScratchDir;
using Backend = IoEngineOptions::Backend;

class IoEngineTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    file_ = dir_.path() / "data.bin";
    data_.resize(1 << 20);
    for (size_t i = 0; i < data_.size(); ++i) data_[i] = static_cast<uint8_t>(i * 7 + i / 4096);
    std::ofstream(file_, std::ios::binary)
        .write(reinterpret_cast<const char*>(data_.data()),
               static_cast<std::streamsize>(data_.size()));
  }
  std::unique_ptr<IoEngine> Engine(IoEngineOptions options = {}) {
    options.backend = GetParam();
    auto e = IoEngine::Create({"disk0", "disk1"}, options);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? std::move(*e) : nullptr;
  }
  // Queue depth 1 and disk 0 slow (64 KiB takes ~16 ms): a first read holds the only slot
  // while the reads after it queue.
  std::unique_ptr<IoEngine> SlowEngine(FaultInjector* faults) {
    faults->SetDiskBandwidth(0, 4 << 20);
    IoEngineOptions o;
    o.queue_depth = 1;
    o.faults = faults;
    return Engine(o);
  }
  // Reads [offset, offset + n) synchronously.
  absl::Status ReadAt(IoEngine& e, uint32_t file, uint64_t offset, uint64_t n, uint8_t* dst) {
    Completions c;
    e.Read(file, offset, n, dst, Priority::kDemand, c.Add(0));
    EXPECT_TRUE(c.Wait(1));
    return c.status(0);
  }

  ScratchDir dir_{"colibri_io_engine_test"};
  std::filesystem::path file_;
  std::vector<uint8_t> data_;
};

INSTANTIATE_TEST_SUITE_P(Backends, IoEngineTest,
                         ::testing::Values(Backend::kIoUring, Backend::kThreads),
                         [](const ::testing::TestParamInfo<Backend>& info) {
                           return info.param == Backend::kIoUring ? "IoUring" : "Threads";
                         });

TEST_P(IoEngineTest, ReadsWithDirectIoAndCountsPerDisk) {
  auto e = Engine();
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->using_io_uring(), GetParam() == Backend::kIoUring);
  auto f0 = e->OpenFile(0, file_);
  auto f1 = e->OpenFile(1, file_);
  ASSERT_TRUE(f0.ok() && f1.ok());
  auto buf = AllocateAligned(1 << 20);
  ASSERT_TRUE(buf.ok());
  // Many reads in flight on both disks at once.
  Completions c;
  for (int i = 0; i < 64; ++i) {
    const uint64_t off = static_cast<uint64_t>(i) * 16384;
    e->Read(i % 2 ? *f1 : *f0, off, 16384, buf->get() + off, Priority::kDemand, c.Add(i));
  }
  ASSERT_TRUE(c.Wait(64));
  for (int i = 0; i < 64; ++i) EXPECT_TRUE(c.status(i).ok()) << c.status(i);
  EXPECT_EQ(std::memcmp(buf->get(), data_.data(), data_.size()), 0);
  EXPECT_EQ(e->Stats(0).reads, 32u);
  EXPECT_EQ(e->Stats(1).bytes, 32u * 16384);
  EXPECT_EQ(e->Stats(0).in_flight, 0u);
  EXPECT_TRUE(e->Stats(0).direct);
}

TEST_P(IoEngineTest, BufferedFallbackWhenDirectIsRefused) {
  IoEngineOptions o;
  o.pretend_direct_refused = true;
  auto e = Engine(o);
  ASSERT_NE(e, nullptr);
  auto f = e->OpenFile(1, file_);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(e->Stats(0).direct);
  EXPECT_FALSE(e->Stats(1).direct);
  auto buf = AllocateAligned(65536);
  ASSERT_TRUE(ReadAt(*e, *f, 65536, 65536, buf->get()).ok());
  EXPECT_EQ(std::memcmp(buf->get(), data_.data() + 65536, 65536), 0);
}

TEST_P(IoEngineTest, ShortReadsAreContinued) {
  FaultInjector faults;
  faults.AddRule({FaultKind::kShortRead, 0, 0, UINT64_MAX, 3});
  IoEngineOptions o;
  o.faults = &faults;
  auto e = Engine(o);
  auto f = e->OpenFile(0, file_);
  auto buf = AllocateAligned(262144);
  ASSERT_TRUE(ReadAt(*e, *f, 131072, 262144, buf->get()).ok());
  EXPECT_EQ(faults.fired(FaultKind::kShortRead), 3u);
  EXPECT_EQ(std::memcmp(buf->get(), data_.data() + 131072, 262144), 0);
}

TEST_P(IoEngineTest, EioAndEofAreErrorsNamingTheFile) {
  FaultInjector faults;
  faults.AddRule({FaultKind::kEio, 1, 8192, 12288, 1});
  IoEngineOptions o;
  o.faults = &faults;
  auto e = Engine(o);
  auto f0 = e->OpenFile(0, file_);
  auto f1 = e->OpenFile(1, file_);
  auto buf = AllocateAligned(16384);
  // Disk 0 and other offsets are unaffected.
  EXPECT_TRUE(ReadAt(*e, *f0, 8192, 4096, buf->get()).ok());
  EXPECT_TRUE(ReadAt(*e, *f1, 0, 4096, buf->get()).ok());
  absl::Status s = ReadAt(*e, *f1, 4096, 16384, buf->get());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;  // EIO
  EXPECT_NE(s.message().find(file_.string()), std::string::npos) << s;
  EXPECT_NE(s.message().find("Input/output error"), std::string::npos) << s;
  EXPECT_EQ(e->Stats(1).errors, 1u);
  // count=1: the next read succeeds.
  EXPECT_TRUE(ReadAt(*e, *f1, 4096, 16384, buf->get()).ok());
  // Reading past the end of the file: EOF before the requested length.
  s = ReadAt(*e, *f0, data_.size() - 4096, 16384, buf->get());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("ends after 4096 of 16384 bytes"), std::string::npos) << s;
}

TEST_P(IoEngineTest, AnEndOfFileAfterTheRequiredBytesIsNotShort) {
  // A file ending mid-page, as a GGUF's last tensor does inside its 4 KiB-aligned range.
  const std::filesystem::path odd = dir_.path() / "odd.bin";
  const uint64_t size = 3 * 4096 + 1000;
  std::ofstream(odd, std::ios::binary)
      .write(reinterpret_cast<const char*>(data_.data()), static_cast<std::streamsize>(size));
  auto e = Engine();
  auto f = e->OpenFile(0, odd);
  ASSERT_TRUE(f.ok()) << f.status();
  auto buf = AllocateAligned(4 * 4096);
  ASSERT_TRUE(buf.ok());
  for (const uint64_t required : {size, size - 500}) {
    std::memset(buf->get(), 0xee, 4 * 4096);
    Completions c;
    e->ReadV(*f, 4096, {iovec{buf->get(), 4 * 4096}}, Priority::kDemand, c.Add(0), required - 4096);
    ASSERT_TRUE(c.Wait(1));
    ASSERT_TRUE(c.status(0).ok()) << c.status(0);
    EXPECT_EQ(std::memcmp(buf->get(), data_.data() + 4096, size - 4096), 0);
  }
  // One byte more than the file holds is DataLoss, as without `required`.
  Completions c;
  e->ReadV(*f, 4096, {iovec{buf->get(), 4 * 4096}}, Priority::kDemand, c.Add(0), size + 1 - 4096);
  ASSERT_TRUE(c.Wait(1));
  EXPECT_EQ(c.status(0).code(), absl::StatusCode::kDataLoss) << c.status(0);
  EXPECT_NE(c.status(0).message().find("ends after"), std::string::npos) << c.status(0);
  EXPECT_EQ(e->Stats(0).bytes, 2 * (size - 4096));  // what was delivered, not what was asked
}

// Reads of 64 KiB at i * 64 KiB of one file. Read 0 (a prefetch) starts first and holds the
// only slot of a SlowEngine while the reads after it queue.
class HeldQueue {
 public:
  HeldQueue(IoEngine& e, const std::filesystem::path& file, int reads) : e_(e) {
    auto f = e.OpenFile(0, file);
    EXPECT_TRUE(f.ok()) << f.status();
    file_ = f.ok() ? *f : 0;
    auto buf = AllocateAligned(static_cast<size_t>(reads) * 65536);
    EXPECT_TRUE(buf.ok());
    buf_ = std::move(*buf);
    first_ = Read(0, Priority::kPrefetch);
    // The thread backend picks reads up asynchronously: wait until read 0 holds the slot.
    colibri::testing::WaitUntil([&] { return e_.Stats(0).in_flight != 0; },
                                std::chrono::seconds(10));
    held_ = e_.Stats(0).in_flight == 1;
  }
  IoEngine::Ticket Read(int i, Priority p) {
    return e_.Read(file_, static_cast<uint64_t>(i) * 65536, 65536, buf_.get() + i * 65536, p,
                   c.Add(i));
  }
  bool held() const { return held_; }
  IoEngine::Ticket first() const { return first_; }
  const uint8_t* bytes(int i) const { return buf_.get() + i * 65536; }
  Completions c;

 private:
  IoEngine& e_;
  uint32_t file_ = 0;
  AlignedBytes buf_;
  bool held_ = false;
  IoEngine::Ticket first_ = 0;
};

TEST_P(IoEngineTest, DemandOvertakesQueuedPrefetch) {
  FaultInjector faults;
  auto e = SlowEngine(&faults);
  HeldQueue q(*e, file_, 5);
  ASSERT_TRUE(q.held());
  q.Read(1, Priority::kPrefetch);
  q.Read(2, Priority::kPrefetch);
  q.Read(3, Priority::kDemand);
  ASSERT_TRUE(q.c.Wait(4));
  EXPECT_EQ(q.c.order(), (std::vector<int>{0, 3, 1, 2}));
}

TEST_P(IoEngineTest, CancelledQueuedReadNeverReachesTheDisk) {
  FaultInjector faults;
  auto e = SlowEngine(&faults);
  HeldQueue q(*e, file_, 4);
  ASSERT_TRUE(q.held());
  q.Read(1, Priority::kPrefetch);
  const IoEngine::Ticket t2 = q.Read(2, Priority::kPrefetch);
  const IoEngine::Ticket t3 = q.Read(3, Priority::kDemand);
  EXPECT_EQ(e->Stats(0).queued, 3u);
  EXPECT_TRUE(e->Cancel(t2));
  EXPECT_FALSE(e->Cancel(t2));         // once
  EXPECT_FALSE(e->Cancel(q.first()));  // submitted: it finishes as it is
  EXPECT_FALSE(e->Cancel(0));
  ASSERT_TRUE(q.c.Wait(4));
  EXPECT_EQ(q.c.order(), (std::vector<int>{2, 0, 3, 1}));  // the cancel is answered at once
  EXPECT_EQ(q.c.status(2).code(), absl::StatusCode::kCancelled) << q.c.status(2);
  EXPECT_NE(q.c.status(2).message().find("cancelled before it reached disk disk0"),
            std::string::npos)
      << q.c.status(2);
  const DiskStats s = e->Stats(0);
  EXPECT_EQ(s.reads, 3u);  // read 2 never reached the device
  EXPECT_EQ(s.bytes, 3u * 65536);
  EXPECT_EQ(s.cancelled, 1u);
  EXPECT_EQ(s.errors, 0u);
  EXPECT_EQ(s.in_flight + s.queued, 0u);
  EXPECT_FALSE(e->Cancel(t3));  // finished
  EXPECT_EQ(std::memcmp(q.bytes(1), data_.data() + 65536, 65536), 0);
}

TEST_P(IoEngineTest, PromotedReadGoesBeforeQueuedPrefetches) {
  FaultInjector faults;
  auto e = SlowEngine(&faults);
  HeldQueue q(*e, file_, 5);
  ASSERT_TRUE(q.held());
  q.Read(1, Priority::kPrefetch);
  q.Read(2, Priority::kDemand);
  q.Read(3, Priority::kPrefetch);
  const IoEngine::Ticket t4 = q.Read(4, Priority::kPrefetch);
  EXPECT_TRUE(e->Promote(t4));
  EXPECT_FALSE(e->Promote(t4));  // already demand
  ASSERT_TRUE(q.c.Wait(5));
  // Demand 2 was queued first, then the promoted 4; the prefetches keep their order.
  EXPECT_EQ(q.c.order(), (std::vector<int>{0, 2, 4, 1, 3}));
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(q.c.status(i).ok()) << q.c.status(i);
  EXPECT_EQ(std::memcmp(q.bytes(0), data_.data(), 5 * 65536), 0);
}

TEST_P(IoEngineTest, PrefetchDepthKeepsSlotsForDemand) {
  // Disk 0 slow (64 KiB ~16 ms), four slots, one for prefetches: three prefetch reads take one
  // slot between them and a demand read arriving later starts at once.
  FaultInjector faults;
  faults.SetDiskBandwidth(0, 4 << 20);
  IoEngineOptions o;
  o.queue_depth = 4;
  o.prefetch_depth = 1;
  o.faults = &faults;
  auto e = Engine(o);
  auto f = e->OpenFile(0, file_);
  ASSERT_TRUE(f.ok());
  auto buf = AllocateAligned(4 * 65536);
  ASSERT_TRUE(buf.ok());
  Completions c;
  for (int i = 0; i < 3; ++i) {
    e->Read(*f, static_cast<uint64_t>(i) * 65536, 65536, buf->get() + i * 65536,
            Priority::kPrefetch, c.Add(i));
  }
  colibri::testing::WaitUntil([&] { return e->Stats(0).in_flight == 1; }, std::chrono::seconds(10));
  DiskStats st = e->Stats(0);
  EXPECT_EQ(st.in_flight, 1u);
  EXPECT_EQ(st.queued, 2u);
  e->Read(*f, 3 * 65536, 65536, buf->get() + 3 * 65536, Priority::kDemand, c.Add(3));
  colibri::testing::WaitUntil([&] { return e->Stats(0).in_flight == 2; }, std::chrono::seconds(10));
  st = e->Stats(0);
  EXPECT_EQ(st.in_flight, 2u);  // beside the prefetch, not behind it
  EXPECT_EQ(st.queued, 2u);
  ASSERT_TRUE(c.Wait(4));
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(c.status(i).ok()) << c.status(i);
  EXPECT_EQ(std::memcmp(buf->get(), data_.data(), 4 * 65536), 0);
}

TEST_P(IoEngineTest, BandwidthCapHoldsCompletions) {
  FaultInjector faults;
  faults.SetDiskBandwidth(0, 8 << 20);  // 8 MiB/s: 1 MiB takes >= 125 ms
  IoEngineOptions o;
  o.faults = &faults;
  auto e = Engine(o);
  auto f = e->OpenFile(0, file_);
  auto buf = AllocateAligned(1 << 20);
  const auto t0 = std::chrono::steady_clock::now();
  Completions c;
  for (int i = 0; i < 16; ++i) {
    e->Read(*f, static_cast<uint64_t>(i) * 65536, 65536, buf->get() + i * 65536, Priority::kDemand,
            c.Add(i));
  }
  ASSERT_TRUE(c.Wait(16));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(secs, 0.12);
  EXPECT_EQ(std::memcmp(buf->get(), data_.data(), 1 << 20), 0);
}

TEST_P(IoEngineTest, MissingFileFailsOpen) {
  auto e = Engine();
  auto f = e->OpenFile(0, dir_.path() / "nope.bin");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(f.status().message().find("nope.bin"), std::string::npos);
}

TEST(FaultSpec, Parses) {
  FaultInjector f;
  EXPECT_TRUE(f.AddSpec("kind=eio,disk=1,offset=0-1M,count=2").ok());
  EXPECT_TRUE(f.AddSpec("kind=slow,disk=2,rate=100M").ok());
  EXPECT_EQ(f.DiskBandwidth(2), 100u << 20);
  EXPECT_EQ(f.DiskBandwidth(0), 0u);
  EXPECT_FALSE(f.AddSpec("kind=melt").ok());
  EXPECT_FALSE(f.AddSpec("disk=1").ok());
  EXPECT_FALSE(f.AddSpec("kind=slow,disk=1").ok());
  EXPECT_FALSE(f.AddSpec("kind=eio,offset=5-1").ok());
  int64_t r = 4096;
  uint8_t b[4096] = {};
  const iovec v{b, sizeof(b)};
  f.AfterRead(1, 0, 4096, {&v, 1}, &r);
  EXPECT_EQ(r, -EIO);
  r = 4096;
  f.AfterRead(0, 0, 4096, {&v, 1}, &r);  // other disk: untouched
  EXPECT_EQ(r, 4096);
  EXPECT_EQ(f.fired(FaultKind::kEio), 1u);
}

}  // namespace
}  // namespace colibri::store
