// FetchScheduler without gRPC or disks: a fake FetchReads holds every read until the test
// completes it, a fake sink records answers and acknowledges writes only when told, and the
// clock is the test's.
#include "colibri/store/fetch_scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "colibri/core/checksum.h"
#include "colibri/expert_source/expert_label.h"

namespace colibri::store {
namespace {

using expert_source::Priority;
using Kind = FetchAnswer::Kind;

// Blocks of model "m": layer 0, experts 0..15, each `block_size` bytes. Reads wait for
// Complete().
class HeldReads : public FetchReads {
 public:
  explicit HeldReads(uint64_t block_size = 10000) {
    for (int32_t e = 0; e < 16; ++e) {
      BlockRecord r;
      r.id = {0, e};
      r.size = block_size;
      r.padded_size = (block_size + 4095) / 4096 * 4096;
      r.checksum = 1000 + static_cast<uint64_t>(e);
      r.extents.push_back(Extent{0, 0, r.padded_size, 0, false});  // a plain model directory's
      records_.push_back(r);
    }
  }
  absl::StatusOr<FetchTarget> Find(std::string_view model,
                                   expert_source::ExpertId id) const override {
    if (model != "m" || id.layer != 0 || id.expert < 0 || id.expert >= 16) {
      return absl::NotFoundError(absl::StrCat("no ", ExpertLabel(id)));
    }
    return FetchTarget{nullptr, &records_[static_cast<size_t>(id.expert)]};
  }
  Handle Read(const FetchTarget& target, Priority priority, uint8_t* dst, Done done) override {
    reads_.push_back(
        {target.block->id.expert, priority, dst, std::move(done), target.begin, target.end});
    handles_.push_back(std::make_shared<BlockRead>());
    return handles_.back();
  }
  void Cancel(const Handle& read) override { cancelled.push_back(ReadOf(read)); }
  void Promote(const Handle& read) override { promoted.push_back(ReadOf(read)); }
  // Reads (by start order) the scheduler cancelled or promoted down here.
  std::vector<int> cancelled, promoted;

  struct Pending {
    int32_t expert;
    Priority priority;
    uint8_t* dst;
    Done done;
    uint64_t begin = 0, end = 0;  // the bytes asked for
  };
  size_t started() const { return reads_.size(); }
  const Pending& read(size_t i) const { return reads_[i]; }
  // Experts of the reads started so far, in order.
  std::vector<int32_t> experts() const {
    std::vector<int32_t> out;
    for (const auto& r : reads_) out.push_back(r.expert);
    return out;
  }
  // Completes read `i` (bytes: expert number + offset, for the chunk checks).
  void Complete(size_t i, absl::Status status = absl::OkStatus()) {
    Pending& p = reads_[i];
    ASSERT_TRUE(p.done) << "read " << i << " completed twice";
    Done done = std::move(p.done);
    p.done = nullptr;
    if (!status.ok() || p.dst != nullptr) {
      done(std::move(status), nullptr);
      return;
    }
    const BlockRecord& r = records_[static_cast<size_t>(p.expert)];
    auto b = std::make_shared<BlockBuffer>();
    b->size = r.size;
    b->padded_size = r.padded_size;
    // A part read holds the pages from the part's first one on, like the block store's.
    b->offset = p.begin == 0 && p.end == r.size ? 0 : p.begin / 4096 * 4096;
    const uint64_t held = r.padded_size - b->offset;
    b->bytes = std::shared_ptr<uint8_t>(new uint8_t[held], std::default_delete<uint8_t[]>());
    for (uint64_t k = 0; k < held; ++k)
      b->bytes.get()[k] = static_cast<uint8_t>(p.expert * 31 + b->offset + k);
    done(absl::OkStatus(), std::move(b));
  }

 private:
  int ReadOf(const Handle& h) const {
    for (size_t i = 0; i < handles_.size(); ++i) {
      if (handles_[i] == h) return static_cast<int>(i);
    }
    return -1;
  }
  std::vector<BlockRecord> records_;
  std::vector<Pending> reads_;
  std::vector<Handle> handles_;
};

class RecordingSink : public FetchSink {
 public:
  void Write(const FetchAnswer& a) override {
    EXPECT_FALSE(writing) << "two writes outstanding";
    EXPECT_FALSE(done) << "a write after the stream finished";
    writing = true;
    FetchAnswer copy = a;
    if (a.kind == Kind::kChunk) {
      copy.data = nullptr;
      EXPECT_EQ(a.chunk_checksum, Checksum64(a.data, a.length));
      chunk_bytes.emplace_back(a.data, a.data + a.length);
    }
    answers.push_back(std::move(copy));
  }
  void ReadNext() override {
    EXPECT_FALSE(done);
    reads_asked++;
  }
  void Finish(const absl::Status& status) override {
    EXPECT_FALSE(done) << "finished twice";
    done = true;
    finish = status;
  }
  void Abort() override { aborted++; }
  void Released() override { released++; }

  bool writing = false;
  bool done = false;
  absl::Status finish;
  int reads_asked = 0, aborted = 0, released = 0;
  std::vector<FetchAnswer> answers;
  std::vector<std::vector<uint8_t>> chunk_bytes;
};

class CountingObserver : public FetchObserver {
 public:
  void QueuedChanged(int64_t d) override { queued += d; }
  void ReadsInFlightChanged(int64_t d) override { in_flight += d; }
  void Rejected() override { rejected++; }
  void Cancelled() override { cancelled++; }
  void DeadlineExceeded() override { deadline++; }
  void Failed(const absl::Status&) override { failed++; }
  void Served(bool demand, uint64_t bytes, bool shm) override {
    (demand ? served_demand : served_prefetch)++;
    served_bytes += bytes;
    shm_served += shm;
  }
  void ReadTime(bool, double) override { timed++; }
  void IdleEnded() override { idle_ended++; }
  int64_t queued = 0, in_flight = 0;
  int rejected = 0, cancelled = 0, deadline = 0, failed = 0, served_demand = 0, served_prefetch = 0,
      shm_served = 0, timed = 0, idle_ended = 0;
  uint64_t served_bytes = 0;
};

FetchBlock Req(uint64_t id, int32_t expert, bool demand, uint32_t timeout_ms = 0) {
  FetchBlock b;
  b.request_id = id;
  b.model = "m";
  b.id = {0, expert};
  b.priority = demand ? Priority::kDemand : Priority::kPrefetch;
  b.timeout_ms = timeout_ms;
  return b;
}

class FetchSchedulerTest : public ::testing::Test {
 protected:
  void Make(FetchLimits limits, uint64_t block_size = 10000) {
    reads_ = std::make_unique<HeldReads>(block_size);
    sched_ = std::make_unique<FetchScheduler>(reads_.get(), &obs_, &sink_, limits,
                                              [this] { return now_; });
  }
  static FetchLimits Limits(size_t reads_in_flight, size_t chunk = 1 << 20) {
    FetchLimits l;
    l.max_reads_in_flight = reads_in_flight;
    l.chunk_bytes = chunk;
    return l;
  }
  // Acknowledges writes until none is outstanding.
  void Drain() {
    while (sink_.writing) {
      sink_.writing = false;
      sched_->WriteDone(true);
    }
  }
  // Final answers (last chunks, errors, shm descriptors) by request id, in order.
  std::vector<uint64_t> Finals() const {
    std::vector<uint64_t> out;
    for (const auto& a : sink_.answers) {
      if (a.kind != Kind::kChunk || a.last) out.push_back(a.request_id);
    }
    return out;
  }
  const FetchAnswer* FinalOf(uint64_t id) const {
    for (const auto& a : sink_.answers) {
      if (a.request_id == id && (a.kind != Kind::kChunk || a.last)) return &a;
    }
    return nullptr;
  }
  absl::StatusCode CodeOf(uint64_t id) const {
    const FetchAnswer* a = FinalOf(id);
    if (a == nullptr) return absl::StatusCode::kUnknown;
    return a->kind == Kind::kError ? a->error.code() : absl::StatusCode::kOk;
  }

  FetchScheduler::Clock::time_point now_{std::chrono::seconds(1000)};
  std::unique_ptr<HeldReads> reads_;
  RecordingSink sink_;
  CountingObserver obs_;
  std::unique_ptr<FetchScheduler> sched_;
};

TEST_F(FetchSchedulerTest, DemandIsReadBeforeQueuedPrefetch) {
  Make(Limits(1));
  sched_->Submit(Req(1, 0, false));
  sched_->Submit(Req(2, 1, false));
  sched_->Submit(Req(3, 2, false));
  sched_->Submit(Req(4, 7, true));
  EXPECT_EQ(sink_.reads_asked, 4);
  EXPECT_EQ(obs_.queued, 3);
  EXPECT_EQ(obs_.in_flight, 1);
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_EQ(reads_->started(), i + 1);
    reads_->Complete(i);
    Drain();
  }
  EXPECT_EQ(reads_->experts(), (std::vector<int32_t>{0, 7, 1, 2}));
  EXPECT_EQ(reads_->read(1).priority, Priority::kDemand);
  EXPECT_EQ(reads_->read(2).priority, Priority::kPrefetch);
  EXPECT_EQ(Finals(), (std::vector<uint64_t>{1, 4, 2, 3}));
  EXPECT_EQ(obs_.served_demand, 1);
  EXPECT_EQ(obs_.served_prefetch, 3);
  EXPECT_EQ(obs_.queued, 0);
  EXPECT_EQ(obs_.in_flight, 0);
}

TEST_F(FetchSchedulerTest, BlocksAreCutIntoChecksummedChunksAndDemandChunksOvertake) {
  Make(Limits(4, 4096));
  sched_->Submit(Req(1, 3, false));
  sched_->Submit(Req(2, 5, true));
  ASSERT_EQ(reads_->started(), 2u);
  reads_->Complete(0);  // the prefetch lands first: its first chunk goes out at once
  reads_->Complete(1);
  Drain();
  std::vector<std::pair<uint64_t, uint64_t>> order;  // (request, offset)
  for (const auto& a : sink_.answers) {
    ASSERT_EQ(a.kind, Kind::kChunk);
    order.push_back({a.request_id, a.offset});
  }
  // Request 2's chunks overtake the rest of request 1.
  EXPECT_EQ(order, (std::vector<std::pair<uint64_t, uint64_t>>{
                       {1, 0}, {2, 0}, {2, 4096}, {2, 8192}, {1, 4096}, {1, 8192}}));
  const FetchAnswer& tail = sink_.answers[3];
  EXPECT_EQ(tail.length, 10000u - 8192u);
  EXPECT_TRUE(tail.last);
  EXPECT_FALSE(sink_.answers[2].last);
  EXPECT_EQ(tail.block_size, 10000u);
  EXPECT_EQ(tail.block_checksum, 1005u);
  EXPECT_EQ(sink_.chunk_bytes[2][0], static_cast<uint8_t>(5 * 31 + 4096));
}

TEST_F(FetchSchedulerTest, APartIsReadAndSentAloneWithBlockOffsets) {
  Make(Limits(4, 4096));
  FetchBlock part = Req(1, 3, true);
  part.range_begin = 5000;
  part.range_end = 9500;
  sched_->Submit(part);
  ASSERT_EQ(reads_->started(), 1u);
  EXPECT_EQ(reads_->read(0).begin, 5000u);
  EXPECT_EQ(reads_->read(0).end, 9500u);
  reads_->Complete(0);
  Drain();
  ASSERT_EQ(sink_.answers.size(), 2u);
  // Chunks at block offsets, cut from the part's start, the last one at the part's end.
  EXPECT_EQ(sink_.answers[0].offset, 5000u);
  EXPECT_EQ(sink_.answers[0].length, 4096u);
  EXPECT_FALSE(sink_.answers[0].last);
  EXPECT_EQ(sink_.answers[1].offset, 9096u);
  EXPECT_EQ(sink_.answers[1].length, 404u);
  EXPECT_TRUE(sink_.answers[1].last);
  EXPECT_EQ(sink_.answers[1].block_size, 10000u);
  EXPECT_EQ(sink_.answers[1].block_checksum, 1003u);
  EXPECT_EQ(sink_.chunk_bytes[0][0], static_cast<uint8_t>(3 * 31 + 5000));
  EXPECT_EQ(sink_.chunk_bytes[1][0], static_cast<uint8_t>(3 * 31 + 9096));
  EXPECT_EQ(obs_.served_bytes, 4500u);  // the part's bytes, not the block's

  // Parts outside the block, empty ones and parts into shared memory are refused.
  FetchBlock past = Req(2, 3, true);
  past.range_begin = 9000;
  past.range_end = 10001;
  FetchBlock empty = Req(3, 3, true);
  empty.range_begin = 500;
  empty.range_end = 500 - 1;
  FetchBlock shm = Req(4, 3, true);
  shm.range_begin = 0;
  shm.range_end = 100;
  shm.has_shm_offset = true;
  for (const FetchBlock& b : {past, empty, shm}) sched_->Submit(b);
  Drain();
  EXPECT_EQ(CodeOf(2), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CodeOf(3), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CodeOf(4), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(reads_->started(), 1u);
}

TEST_F(FetchSchedulerTest, APartIsChargedThePagesItsReadHolds) {
  // One-byte parts each hold a 4 KiB page until written: with 8 KiB of buffer, two reads start
  // and the third waits for the network (charged one byte each, all three would start).
  FetchLimits limits = Limits(4);
  limits.max_buffered_bytes = 8192;
  Make(limits);
  for (uint64_t id = 1; id <= 3; ++id) {
    FetchBlock b = Req(id, static_cast<int32_t>(id), true);
    b.range_begin = 5000;
    b.range_end = 5001;
    sched_->Submit(b);
  }
  EXPECT_EQ(reads_->started(), 2u);
  reads_->Complete(0);
  reads_->Complete(1);
  Drain();  // the answers are written: their pages are free again
  EXPECT_EQ(reads_->started(), 3u);
  reads_->Complete(2);
  Drain();
  EXPECT_EQ(Finals(), (std::vector<uint64_t>{1, 2, 3}));
  // A part that names a start without an end is not the whole block.
  FetchBlock no_end = Req(9, 1, true);
  no_end.range_begin = 100;
  sched_->Submit(no_end);
  Drain();
  EXPECT_EQ(CodeOf(9), absl::StatusCode::kInvalidArgument);
}

TEST_F(FetchSchedulerTest, QueueCapRejectsWithResourceExhausted) {
  FetchLimits l = Limits(1);
  l.max_queued = 2;
  Make(l);
  for (uint64_t id = 1; id <= 4; ++id) sched_->Submit(Req(id, static_cast<int32_t>(id), true));
  // One read in progress, two queued, the fourth refused.
  EXPECT_EQ(reads_->started(), 1u);
  EXPECT_EQ(CodeOf(4), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(FinalOf(4)->error.message().find("more than 2 requests queued"), std::string::npos);
  EXPECT_EQ(obs_.rejected, 1);
  EXPECT_EQ(obs_.queued, 2);
}

TEST_F(FetchSchedulerTest, BufferedBytesPauseReadsUntilWritten) {
  FetchLimits l = Limits(8, 4096);
  l.max_buffered_bytes = 10000;  // one block
  Make(l);
  sched_->Submit(Req(1, 1, true));
  sched_->Submit(Req(2, 2, true));
  EXPECT_EQ(reads_->started(), 1u);  // the read in progress fills the buffer
  reads_->Complete(0);               // one chunk cut: 5904 bytes wait, under the cap
  EXPECT_EQ(reads_->started(), 2u);
  sched_->Submit(Req(3, 3, true));
  EXPECT_EQ(reads_->started(), 2u);  // 5904 waiting + 10000 being read
  Drain();                           // request 1 written; request 2 still being read
  EXPECT_EQ(reads_->started(), 2u);
  reads_->Complete(1);
  EXPECT_EQ(reads_->started(), 3u);
  // Full again (10000 being read + 5904 waiting); shared-memory reads take only a read slot.
  std::vector<uint8_t> region(1 << 16);
  sched_->Attached(true, "", region.data(), region.size());
  FetchBlock shm = Req(4, 4, true);
  shm.has_shm_offset = true;
  shm.shm_offset = 16384;
  sched_->Submit(shm);
  ASSERT_EQ(reads_->started(), 4u);
  EXPECT_EQ(reads_->read(3).dst, region.data() + 16384);
  sched_->Submit(Req(5, 5, true));
  EXPECT_EQ(reads_->started(), 4u);
}

TEST_F(FetchSchedulerTest, DeadlinesWhileQueuedAndWhileRead) {
  Make(Limits(1));
  sched_->Submit(Req(1, 1, true));
  sched_->Submit(Req(2, 2, true, 5));   // waits behind request 1
  sched_->Submit(Req(3, 3, true, 50));  // read in time, finishes late
  now_ += std::chrono::milliseconds(10);
  reads_->Complete(0);
  Drain();
  EXPECT_EQ(CodeOf(1), absl::StatusCode::kOk);
  EXPECT_EQ(CodeOf(2), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(FinalOf(2)->error.message().find("still queued after the request's 5 ms timeout"),
            std::string::npos)
      << FinalOf(2)->error;
  ASSERT_EQ(reads_->experts(), (std::vector<int32_t>{1, 3}));  // request 2 was never read
  now_ += std::chrono::milliseconds(100);
  reads_->Complete(1);
  Drain();
  EXPECT_EQ(CodeOf(3), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(FinalOf(3)->error.message().find("read finished after the request's 50 ms timeout"),
            std::string::npos)
      << FinalOf(3)->error;
  EXPECT_EQ(obs_.deadline, 2);
  EXPECT_EQ(obs_.served_demand, 1);
}

TEST_F(FetchSchedulerTest, CancelQueuedInProgressAndWaiting) {
  Make(Limits(1, 4096));
  sched_->Submit(Req(1, 1, true));
  reads_->Complete(0);               // request 1's first chunk is being written, the rest waits
  sched_->Submit(Req(2, 2, false));  // read in progress
  sched_->Submit(Req(3, 3, false));  // queued
  ASSERT_EQ(reads_->started(), 2u);
  const uint64_t ids[] = {3, 2, 1, 99};
  sched_->Cancel(ids);
  Drain();
  EXPECT_EQ(CodeOf(3), absl::StatusCode::kCancelled);
  EXPECT_EQ(CodeOf(1), absl::StatusCode::kCancelled);
  EXPECT_EQ(FinalOf(2), nullptr);    // only when its read ends
  EXPECT_EQ(reads_->started(), 2u);  // request 3 never reached the reads
  reads_->Complete(1);
  Drain();
  EXPECT_EQ(CodeOf(2), absl::StatusCode::kCancelled);
  EXPECT_EQ(obs_.cancelled, 3);
  EXPECT_EQ(obs_.served_prefetch, 0);
  // Request 1: one chunk out, then the cancel; nothing more of it.
  int chunks_of_1 = 0;
  for (const auto& a : sink_.answers) chunks_of_1 += a.request_id == 1 && a.kind == Kind::kChunk;
  EXPECT_EQ(chunks_of_1, 1);
  // Buffer accounting survived: a new block is read at once.
  sched_->Submit(Req(4, 4, true));
  EXPECT_EQ(reads_->started(), 3u);
}

TEST_F(FetchSchedulerTest, PromoteMovesPrefetchesAhead) {
  Make(Limits(1));
  sched_->Submit(Req(1, 1, false));  // read in progress, then promoted
  sched_->Submit(Req(2, 2, false));
  sched_->Submit(Req(3, 3, false));  // promoted while queued
  sched_->Submit(Req(4, 4, true));
  const uint64_t ids[] = {3, 1, 77};
  sched_->Promote(ids);
  for (size_t i = 0; i < 4; ++i) {
    reads_->Complete(i);
    Drain();
  }
  // Demand 4 was queued first, then the promoted 3; prefetch 2 last.
  EXPECT_EQ(reads_->experts(), (std::vector<int32_t>{1, 4, 3, 2}));
  EXPECT_EQ(reads_->read(2).priority, Priority::kDemand);
  EXPECT_EQ(obs_.served_demand, 3);  // 1 counts as demand: promoted while read
  EXPECT_EQ(obs_.served_prefetch, 1);
}

TEST_F(FetchSchedulerTest, CancelAndPromoteOfReadsInProgressReachTheDisks) {
  Make(Limits(2));
  sched_->Submit(Req(1, 1, false));
  sched_->Submit(Req(2, 2, false));
  sched_->Submit(Req(3, 3, false));  // queued: promoted and cancelled here, not below
  const uint64_t promote[] = {2, 3, 2};
  sched_->Promote(promote);
  const uint64_t cancel[] = {1, 3, 1};
  sched_->Cancel(cancel);
  EXPECT_EQ(reads_->promoted, std::vector<int>{1});  // read 1 is request 2's
  EXPECT_EQ(reads_->cancelled, std::vector<int>{0});
  reads_->Complete(0, absl::CancelledError("cancelled before it reached disk d0"));
  reads_->Complete(1);
  Drain();
  EXPECT_EQ(CodeOf(1), absl::StatusCode::kCancelled);
  EXPECT_EQ(FinalOf(1)->error.message(), "cancelled by the client");
  EXPECT_EQ(CodeOf(2), absl::StatusCode::kOk);
  EXPECT_EQ(CodeOf(3), absl::StatusCode::kCancelled);
  EXPECT_EQ(reads_->started(), 2u);  // request 3 never reached the reads
  EXPECT_EQ(obs_.served_demand, 1);
  EXPECT_EQ(obs_.failed, 0);  // a cancelled read is no read error
}

TEST_F(FetchSchedulerTest, PromotedAnswerOvertakesWaitingPrefetchAnswers) {
  Make(Limits(3, 4096));
  sched_->Submit(Req(1, 1, false));
  sched_->Submit(Req(2, 2, false));
  sched_->Submit(Req(3, 3, false));
  for (size_t i = 0; i < 3; ++i) reads_->Complete(i);  // 1 is being written, 2 and 3 wait
  const uint64_t ids[] = {3};
  sched_->Promote(ids);
  Drain();
  EXPECT_EQ(Finals(), (std::vector<uint64_t>{3, 1, 2}));
}

TEST_F(FetchSchedulerTest, BatchIsScheduledAsOneUnit) {
  Make(Limits(1));
  // Sent one by one, the first prefetch would take the only read slot; in one batch the
  // demand request goes first.
  const std::vector<FetchBlock> batch = {Req(1, 1, false), Req(2, 2, false), Req(3, 3, true)};
  sched_->SubmitBatch(batch);
  EXPECT_EQ(sink_.reads_asked, 1);
  for (size_t i = 0; i < 3; ++i) {
    reads_->Complete(i);
    Drain();
  }
  EXPECT_EQ(reads_->experts(), (std::vector<int32_t>{3, 1, 2}));
  EXPECT_EQ(Finals(), (std::vector<uint64_t>{3, 1, 2}));
}

TEST_F(FetchSchedulerTest, BatchRequestsAreAnsweredAsIfSentAlone) {
  FetchLimits l = Limits(1);
  l.max_queued = 2;
  Make(l);
  const std::vector<FetchBlock> batch = {Req(1, 1, true), Req(2, 40, true), Req(3, 3, true),
                                         Req(4, 4, true), Req(5, 5, true)};
  sched_->SubmitBatch(batch);
  Drain();
  EXPECT_EQ(CodeOf(2), absl::StatusCode::kNotFound);           // no such block
  EXPECT_EQ(CodeOf(5), absl::StatusCode::kResourceExhausted);  // queue cap
  EXPECT_EQ(obs_.rejected, 1);
  EXPECT_EQ(obs_.failed, 1);
  for (size_t i = 0; i < 3; ++i) {
    reads_->Complete(i);
    Drain();
  }
  for (uint64_t id : {1, 3, 4}) EXPECT_EQ(CodeOf(id), absl::StatusCode::kOk) << id;
}

TEST_F(FetchSchedulerTest, BadBatchSizesGetTheStreamsError) {
  struct Case {
    size_t n;
    bool accepted;
  };
  for (const Case& c : {Case{0, false}, Case{1, true}, Case{4096, true}, Case{4097, false}}) {
    SCOPED_TRACE(c.n);
    FetchLimits l = Limits(1);
    l.max_queued = 5000;
    sink_ = RecordingSink();
    Make(l);
    std::vector<FetchBlock> batch;
    for (size_t i = 0; i < c.n; ++i)
      batch.push_back(Req(i + 1, static_cast<int32_t>(i % 16), true));
    sched_->SubmitBatch(batch);
    EXPECT_EQ(sink_.reads_asked, 1);  // the stream reads on
    if (c.accepted) {
      EXPECT_EQ(reads_->started(), 1u);
      EXPECT_TRUE(sink_.answers.empty());
    } else {
      EXPECT_EQ(reads_->started(), 0u);
      ASSERT_EQ(sink_.answers.size(), 1u);
      EXPECT_EQ(sink_.answers[0].request_id, 0u);
      EXPECT_EQ(sink_.answers[0].error.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(sink_.answers[0].error.message().find(absl::StrCat("holds ", c.n)),
                std::string::npos)
          << sink_.answers[0].error;
    }
    sched_->Done();
  }
}

TEST_F(FetchSchedulerTest, SharedMemorySlots) {
  Make(Limits(4));
  std::vector<uint8_t> region(64 << 10);
  FetchBlock early = Req(1, 1, true);
  early.has_shm_offset = true;
  sched_->Submit(early);
  EXPECT_EQ(CodeOf(1), absl::StatusCode::kFailedPrecondition);
  Drain();
  sched_->Attached(true, "", region.data(), region.size());
  ASSERT_EQ(sink_.answers.back().kind, Kind::kShmAttached);
  EXPECT_TRUE(sink_.answers.back().attach_ok);
  EXPECT_TRUE(sched_->has_shm());
  Drain();
  struct Case {
    uint64_t offset;
    absl::StatusCode code;
  };
  // Blocks are 10000 bytes, 12288 padded; the region is 65536.
  const Case cases[] = {{0, absl::StatusCode::kOk},
                        {53248, absl::StatusCode::kOk},
                        {100, absl::StatusCode::kInvalidArgument},
                        {57344, absl::StatusCode::kInvalidArgument},
                        {1u << 20, absl::StatusCode::kInvalidArgument}};
  uint64_t id = 10;
  size_t started = 0;
  for (const Case& c : cases) {
    FetchBlock b = Req(id, 2, true);
    b.has_shm_offset = true;
    b.shm_offset = c.offset;
    sched_->Submit(b);
    if (c.code == absl::StatusCode::kOk) {
      ASSERT_EQ(reads_->started(), ++started);
      EXPECT_EQ(reads_->read(started - 1).dst, region.data() + c.offset);
      reads_->Complete(started - 1);
    }
    Drain();
    EXPECT_EQ(CodeOf(id), c.code) << c.offset;
    if (c.code == absl::StatusCode::kOk) {
      EXPECT_EQ(FinalOf(id)->kind, Kind::kShmBlock);
      EXPECT_EQ(FinalOf(id)->shm_offset, c.offset);
      EXPECT_EQ(FinalOf(id)->block_size, 10000u);
      EXPECT_EQ(FinalOf(id)->block_checksum, 1002u);
    }
    ++id;
  }
  EXPECT_EQ(obs_.shm_served, 2);
}

TEST_F(FetchSchedulerTest, ErrorsAreAnsweredPerRequest) {
  Make(Limits(2));
  sched_->Submit(Req(1, 99, true));  // not found
  sched_->Submit(Req(2, 2, true));
  sched_->Submit(Req(2, 3, true));  // the same id while it is read
  reads_->Complete(0, absl::DataLossError("stripe 1: checksum mismatch"));
  Drain();
  EXPECT_EQ(CodeOf(1), absl::StatusCode::kNotFound);
  EXPECT_EQ(sink_.answers[0].error.message(), "no expert (layer 0, id 99)");
  std::vector<absl::StatusCode> codes_of_2;
  for (const auto& a : sink_.answers) {
    if (a.request_id == 2) codes_of_2.push_back(a.error.code());
  }
  EXPECT_EQ(codes_of_2, (std::vector<absl::StatusCode>{absl::StatusCode::kInvalidArgument,
                                                       absl::StatusCode::kDataLoss}));
  EXPECT_EQ(obs_.failed, 2);
}

TEST_F(FetchSchedulerTest, FinishesOkOnceEverythingIsWritten) {
  Make(Limits(1, 4096));
  sched_->Submit(Req(1, 1, true));
  sched_->ClientDone();
  EXPECT_FALSE(sink_.done);  // a read is owed
  reads_->Complete(0);
  EXPECT_FALSE(sink_.done);  // chunks are owed
  Drain();
  EXPECT_TRUE(sink_.done);
  EXPECT_TRUE(sink_.finish.ok());
  EXPECT_TRUE(sched_->Done());
}

TEST_F(FetchSchedulerTest, BrokenStreamFinishesCancelledAndReleasesAfterTheLastRead) {
  Make(Limits(2));
  sched_->Submit(Req(1, 1, true));
  sched_->Submit(Req(2, 2, true));
  sched_->Submit(Req(3, 3, true));
  sched_->Broken();
  EXPECT_TRUE(sink_.done);
  EXPECT_EQ(sink_.finish.code(), absl::StatusCode::kCancelled);
  EXPECT_FALSE(sched_->Done());  // two reads are still landing
  EXPECT_EQ(obs_.queued, 0);
  reads_->Complete(0);
  EXPECT_EQ(sink_.released, 0);
  reads_->Complete(1);
  EXPECT_EQ(sink_.released, 1);
  EXPECT_TRUE(sink_.answers.empty());
  EXPECT_EQ(reads_->started(), 2u);
}

TEST_F(FetchSchedulerTest, IdleStreamsEnd) {
  const auto timeout = std::chrono::milliseconds(200);
  Make(Limits(1));
  sched_->Submit(Req(1, 1, true));
  now_ += std::chrono::seconds(1);
  EXPECT_EQ(sched_->ExpireIfIdle(now_, timeout), FetchScheduler::Idle::kBusy);  // read running
  reads_->Complete(0);  // its answer is being written and not acknowledged
  EXPECT_EQ(sched_->ExpireIfIdle(now_, timeout), FetchScheduler::Idle::kStuck);
  EXPECT_EQ(sink_.aborted, 1);
  Drain();  // the answer went out now: the stream was active then
  EXPECT_EQ(sched_->ExpireIfIdle(now_ + std::chrono::milliseconds(100), timeout),
            FetchScheduler::Idle::kBusy);
  EXPECT_EQ(sched_->ExpireIfIdle(now_ + std::chrono::milliseconds(300), timeout),
            FetchScheduler::Idle::kFinished);
  EXPECT_TRUE(sink_.done);
  EXPECT_TRUE(sink_.finish.ok());
  EXPECT_EQ(obs_.idle_ended, 2);
  sched_->Submit(Req(2, 2, true));  // after the end: ignored
  EXPECT_EQ(reads_->started(), 1u);
  EXPECT_EQ(sink_.reads_asked, 1);
}

TEST_F(FetchSchedulerTest, RefusedStreamFinishesOnceAndNeverReads) {
  Make(Limits(1));
  sched_->Refuse(absl::ResourceExhaustedError("too many streams"));
  sched_->Broken();
  EXPECT_EQ(sched_->ExpireIfIdle(now_ + std::chrono::hours(1), std::chrono::milliseconds(1)),
            FetchScheduler::Idle::kBusy);
  EXPECT_EQ(sink_.finish.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(sched_->Done());
}

}  // namespace
}  // namespace colibri::store
