// The Fetch stream end to end, in process: BlockStore + ExpertStoreService behind a gRPC
// server on a unix socket, against the raw stub and against Remote/MultiStoreSource.
#include "store_service.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "../../../libs/store/src/store_test_util.h"
#include "colibri/core/checksum.h"
#include "colibri/rpc/multi_store_source.h"
#include "colibri/rpc/remote_store_source.h"
#include "colibri/rpc/status.h"
#include "colibri/store/ingest.h"
#include "grpcpp/grpcpp.h"

namespace colibri::store {
namespace {

namespace fs = std::filesystem;
using expert_source::ExpertId;
using expert_source::Lease;
using expert_source::Priority;
using testing::ScratchDir;

// A store served on a unix socket.
class TestServer {
 public:
  TestServer(BlockStoreOptions bo, StoreOptions so, const std::string& socket) : socket_(socket) {
    auto s = BlockStore::Open(bo);
    EXPECT_TRUE(s.ok()) << s.status();
    store_ = std::move(*s);
    registry_ = std::make_shared<prometheus::Registry>();
    metrics_ = std::make_unique<StoreMetrics>(registry_);
    service_ = std::make_unique<ExpertStoreService>(store_.get(), so, metrics_.get());
    grpc::ServerBuilder b;
    b.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
    b.RegisterService(service_.get());
    server_ = b.BuildAndStart();
    EXPECT_NE(server_, nullptr);
  }
  ~TestServer() { Stop(); }
  void Stop() {
    if (server_)
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
    server_.reset();
  }
  std::string target() const { return "unix:" + socket_; }
  BlockStore& store() { return *store_; }
  StoreMetrics& metrics() { return *metrics_; }

 private:
  std::string socket_;
  std::unique_ptr<BlockStore> store_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<StoreMetrics> metrics_;
  std::unique_ptr<ExpertStoreService> service_;
  std::unique_ptr<grpc::Server> server_;
};

class StoreServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_dir_ = dir_.path() / "model";
    testing::WriteTinyModel(model_dir_, "tiny", 2, 8);
    auto c = model::Container::Open(model_dir_);
    ASSERT_TRUE(c.ok());
    container_ = std::move(*c);
    disks_ = {dir_.path() / "d0", dir_.path() / "d1"};
    ImportOptions o;
    o.stripe_size = 8192;
    ASSERT_TRUE(ImportModel(model_dir_, StoreLocation{disks_, {}}, o).ok());
  }

  std::unique_ptr<TestServer> Serve(StoreOptions so = {}, FaultInjector* faults = nullptr,
                                    const std::string& name = "s",
                                    std::vector<fs::path> disks = {}) {
    BlockStoreOptions bo;
    bo.disks = disks.empty() ? disks_ : disks;
    bo.io.faults = faults;
    return std::make_unique<TestServer>(bo, so, (dir_.path() / (name + ".sock")).string());
  }

  // One read in flight per stream and both disks capped at `rate` bytes/s: requests sent
  // together queue behind the first read.
  std::unique_ptr<TestServer> ServeOneReadAtATime(uint64_t rate) {
    slow_.SetDiskBandwidth(0, rate);
    slow_.SetDiskBandwidth(1, rate);
    StoreOptions so;
    so.max_reads_in_flight = 1;
    return Serve(so, &slow_);
  }

  rpc::RemoteStoreOptions Client(const TestServer& s, uint64_t shm_bytes = 0) {
    rpc::RemoteStoreOptions o;
    o.target = s.target();
    o.model = "tiny";
    o.shm_bytes = shm_bytes;
    o.fetch_timeout = std::chrono::seconds(20);
    return o;
  }

  void ExpectBlock(const Lease& lease, int64_t layer, int64_t expert) {
    ASSERT_NE(lease, nullptr);
    auto want = container_->ReadExpertBlock(layer, expert);
    ASSERT_TRUE(want.ok());
    ASSERT_EQ(lease->size, container_->manifest().Expert(layer, expert).size);
    EXPECT_EQ(std::memcmp(lease->data(), want->get(), lease->size), 0) << layer << "/" << expert;
  }

  // One FetchMany of `ids`, every block checked against the model.
  void FetchAllAndCheck(expert_source::ExpertSource& src, const std::vector<ExpertId>& ids) {
    const absl::Status st =
        src.FetchMany(ids, [&](size_t i, Lease l) { ExpectBlock(l, ids[i].layer, ids[i].expert); });
    ASSERT_TRUE(st.ok()) << st;
  }

  std::vector<ExpertId> AllIds() const {
    std::vector<ExpertId> ids;
    for (int32_t l = 0; l < 2; ++l)
      for (int32_t e = 0; e < 8; ++e) ids.push_back({l, e});
    return ids;
  }

  // Raw protocol: one stream, requests written up front, final answers collected in order.
  struct Answer {
    uint64_t id;
    absl::StatusCode code;
    std::string message;
  };
  std::vector<Answer> RawExchange(const TestServer& s, const std::vector<v1::FetchRequest>& reqs,
                                  size_t expect) {
    auto channel = grpc::CreateChannel(s.target(), grpc::InsecureChannelCredentials());
    auto stub = v1::ExpertStore::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto stream = stub->Fetch(&ctx);
    for (const auto& r : reqs) EXPECT_TRUE(stream->Write(r));
    std::vector<Answer> out;
    v1::FetchResponse resp;
    while (out.size() < expect && stream->Read(&resp)) {
      if (resp.has_error()) {
        out.push_back({resp.request_id(), static_cast<absl::StatusCode>(resp.error().code()),
                       resp.error().message()});
      } else if (resp.has_chunk() && resp.chunk().last()) {
        out.push_back({resp.request_id(), absl::StatusCode::kOk, ""});
      }
    }
    stream->WritesDone();
    stream->Finish();
    return out;
  }

  static v1::FetchRequest Block(uint64_t id, int layer, int expert, bool demand,
                                uint32_t timeout_ms = 0) {
    v1::FetchRequest r;
    auto* b = r.mutable_block();
    b->set_request_id(id);
    b->mutable_key()->set_model("tiny");
    b->mutable_key()->set_layer(static_cast<uint32_t>(layer));
    b->mutable_key()->set_expert(static_cast<uint32_t>(expert));
    b->set_priority(demand ? v1::PRIORITY_DEMAND : v1::PRIORITY_PREFETCH);
    b->set_timeout_ms(timeout_ms);
    return r;
  }
  static v1::FetchRequest Cancel(uint64_t id) {
    v1::FetchRequest r;
    r.mutable_cancel()->set_request_id(id);
    return r;
  }

  ScratchDir dir_{"colibri_store_service_test"};
  FaultInjector slow_;  // ServeOneReadAtATime's
  fs::path model_dir_;
  std::unique_ptr<model::Container> container_;
  std::vector<fs::path> disks_;
};

TEST_F(StoreServiceTest, ChunksOverTheStream) {
  auto server = Serve();
  auto src = rpc::RemoteStoreSource::Connect(Client(*server), &container_->manifest());
  ASSERT_TRUE(src.ok()) << src.status();
  const auto ids = AllIds();
  std::vector<int> calls(ids.size());
  ASSERT_TRUE((*src)
                  ->FetchMany(ids,
                              [&](size_t i, Lease l) {
                                calls[i]++;
                                ExpectBlock(l, ids[i].layer, ids[i].expert);
                              })
                  .ok());
  EXPECT_EQ(calls, std::vector<int>(ids.size(), 1));
  EXPECT_EQ((*src)->Stats().blocks, ids.size());
  EXPECT_EQ((*src)->Stats().shm_blocks, 0u);
  EXPECT_EQ(server->metrics().bytes_served->Value(),
            static_cast<double>(container_->manifest().TotalExpertBytes()));
  EXPECT_EQ(server->metrics().shm_bytes_served->Value(), 0);
}

TEST_F(StoreServiceTest, SharedMemoryCarriesTheBytes) {
  auto server = Serve();
  auto src = rpc::RemoteStoreSource::Connect(Client(*server, 1 << 20), &container_->manifest());
  ASSERT_TRUE(src.ok()) << src.status();
  const auto ids = AllIds();
  std::vector<Lease> held;
  // The first fetch opens the stream; blocks asked before the store accepts the region come as
  // chunks, so ask one first and then everything.
  ASSERT_TRUE((*src)->Fetch({0, 0}, Priority::kDemand).ok());
  ASSERT_TRUE((*src)
                  ->FetchMany(ids,
                              [&](size_t i, Lease l) {
                                ExpectBlock(l, ids[i].layer, ids[i].expert);
                                EXPECT_EQ(reinterpret_cast<uintptr_t>(l->data()) % 4096, 0u);
                                held.push_back(std::move(l));
                              })
                  .ok());
  const auto stats = (*src)->Stats();
  EXPECT_TRUE(stats.shm_active);
  EXPECT_EQ(stats.shm_blocks, ids.size());
  EXPECT_GT(server->metrics().shm_bytes_served->Value(), 0);
  // Nothing is left in /dev/shm once both sides have it mapped.
  for (const auto& e : fs::directory_iterator("/dev/shm")) {
    EXPECT_EQ(e.path().filename().string().find("colibri-" + std::to_string(::getpid()) + "-"),
              std::string::npos);
  }
  // Leases keep their slots: a region of 1 MiB holds 16 blocks of 20 KiB; dropping them
  // frees the slots for the next round.
  held.clear();
  ASSERT_TRUE(
      (*src)
          ->FetchMany(ids, [&](size_t i, Lease l) { ExpectBlock(l, ids[i].layer, ids[i].expert); })
          .ok());
  EXPECT_EQ((*src)->Stats().shm_blocks, 2 * ids.size());
}

TEST_F(StoreServiceTest, SharedMemoryRegionTooSmallFallsBackToChunks) {
  auto server = Serve();
  auto src = rpc::RemoteStoreSource::Connect(Client(*server, 3 * 20480), &container_->manifest());
  ASSERT_TRUE((*src)->Fetch({0, 0}, Priority::kDemand).ok());
  std::vector<Lease> held;
  const auto ids = AllIds();
  ASSERT_TRUE((*src)
                  ->FetchMany(ids,
                              [&](size_t i, Lease l) {
                                ExpectBlock(l, ids[i].layer, ids[i].expert);
                                held.push_back(std::move(l));
                              })
                  .ok());
  const auto stats = (*src)->Stats();
  EXPECT_LE(stats.shm_blocks, 4u);
  EXPECT_EQ(stats.blocks, ids.size() + 1);
}

TEST_F(StoreServiceTest, CorruptStripeIsDataLossOverBothTransports) {
  {
    // Find where stripe 1 of expert (1, 5) lives and flip a byte there.
    auto s = BlockStore::Open(BlockStoreOptions{disks_});
    const Extent e = (*s)->FindModel("tiny")->Find({1, 5})->extents[1];
    testing::FlipByteAt(StripeFilePath(disks_[e.disk], "tiny"), e.offset + 7);
  }
  auto server = Serve();
  for (uint64_t shm : {uint64_t{0}, uint64_t{1} << 20}) {
    auto src = rpc::RemoteStoreSource::Connect(Client(*server, shm), &container_->manifest());
    ASSERT_TRUE((*src)->Fetch({0, 1}, Priority::kDemand).ok());
    auto r = (*src)->Fetch({1, 5}, Priority::kDemand);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
    const std::string msg(r.status().message());
    EXPECT_NE(msg.find("expert (layer 1, id 5)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("stripe 1 of 3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("on disk"), std::string::npos) << msg;
  }
  EXPECT_EQ(server->metrics().checksum_failures->Value(), 2);
}

TEST_F(StoreServiceTest, DemandOvertakesQueuedPrefetches) {
  FaultInjector faults;
  faults.SetDiskBandwidth(0, 2 << 20);  // every read waits for the slow disk
  faults.SetDiskBandwidth(1, 2 << 20);
  StoreOptions so;
  so.max_reads_in_flight = 1;
  auto server = Serve(so, &faults);
  auto answers = RawExchange(
      *server,
      {Block(1, 0, 0, false), Block(2, 0, 1, false), Block(3, 0, 2, false), Block(4, 1, 7, true)},
      4);
  ASSERT_EQ(answers.size(), 4u);
  std::vector<uint64_t> order;
  for (const auto& a : answers) {
    EXPECT_EQ(a.code, absl::StatusCode::kOk) << a.message;
    order.push_back(a.id);
  }
  // Request 1 was already being read; the demand request goes before the queued prefetches.
  EXPECT_EQ(order, (std::vector<uint64_t>{1, 4, 2, 3}));
}

TEST_F(StoreServiceTest, CancelAnswersCancelledQueuedOrInFlight) {
  FaultInjector faults;
  faults.SetDiskBandwidth(0, 1 << 20);
  faults.SetDiskBandwidth(1, 1 << 20);
  StoreOptions so;
  so.max_reads_in_flight = 1;
  auto server = Serve(so, &faults);
  auto answers = RawExchange(
      *server, {Block(1, 0, 0, false), Block(2, 0, 1, false), Cancel(2), Cancel(1), Cancel(99)}, 2);
  ASSERT_EQ(answers.size(), 2u);
  std::map<uint64_t, absl::StatusCode> codes;
  for (const auto& a : answers) codes[a.id] = a.code;
  EXPECT_EQ(codes[1], absl::StatusCode::kCancelled);  // in flight: answered when its read ended
  EXPECT_EQ(codes[2], absl::StatusCode::kCancelled);  // queued
  EXPECT_EQ(server->metrics().cancellations->Value(), 2);
}

TEST_F(StoreServiceTest, DeadlinesAndCapsAreEnforced) {
  FaultInjector faults;
  faults.SetDiskBandwidth(0, 1 << 20);  // 20 KiB blocks: ~10 ms per stripe unit pair
  faults.SetDiskBandwidth(1, 1 << 20);
  StoreOptions so;
  so.max_reads_in_flight = 1;
  so.max_queued = 3;
  auto server = Serve(so, &faults);
  std::vector<v1::FetchRequest> reqs;
  for (int i = 0; i < 6; ++i) reqs.push_back(Block(10 + i, 1, i, true, i == 3 ? 5 : 0));
  auto answers = RawExchange(*server, reqs, 6);
  ASSERT_EQ(answers.size(), 6u);
  std::map<uint64_t, absl::StatusCode> codes;
  for (const auto& a : answers) codes[a.id] = a.code;
  int exhausted = 0;
  for (const auto& [id, code] : codes) exhausted += code == absl::StatusCode::kResourceExhausted;
  EXPECT_GE(exhausted, 1);
  EXPECT_EQ(codes[10], absl::StatusCode::kOk);
  // Request 13 (5 ms timeout) waited behind slower reads.
  EXPECT_TRUE(codes[13] == absl::StatusCode::kDeadlineExceeded ||
              codes[13] == absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(server->metrics().rejected_requests->Value(), exhausted);
}

TEST_F(StoreServiceTest, StreamsPastTheCapAreRefused) {
  StoreOptions so;
  so.max_streams = 1;
  auto server = Serve(so);
  // A second stream while one is open: RESOURCE_EXHAUSTED.
  auto channel = grpc::CreateChannel(server->target(), grpc::InsecureChannelCredentials());
  auto stub = v1::ExpertStore::NewStub(channel);
  grpc::ClientContext c1, c2;
  auto s1 = stub->Fetch(&c1);
  ASSERT_TRUE(s1->Write(Block(1, 0, 0, true)));
  v1::FetchResponse resp;
  ASSERT_TRUE(s1->Read(&resp));  // s1 is open and served
  auto s2 = stub->Fetch(&c2);
  v1::FetchResponse r2;
  EXPECT_FALSE(s2->Read(&r2));
  grpc::Status st = s2->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_EQ(server->metrics().rejected_streams->Value(), 1);
  s1->WritesDone();
  while (s1->Read(&resp)) {
  }
  s1->Finish();
}

// Waits (up to 10 s) until `done` holds; false on timeout.
template <typename F>
bool WaitFor(F done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST_F(StoreServiceTest, OneClientCannotTakeEveryStream) {
  StoreOptions so;
  so.max_streams = 10;
  so.max_streams_per_client = 2;
  auto server = Serve(so);
  auto channel = grpc::CreateChannel(server->target(), grpc::InsecureChannelCredentials());
  auto stub = v1::ExpertStore::NewStub(channel);
  grpc::ClientContext c[4];
  std::unique_ptr<grpc::ClientReaderWriter<v1::FetchRequest, v1::FetchResponse>> s[4];
  v1::FetchResponse resp;
  for (int i = 0; i < 2; ++i) {
    s[i] = stub->Fetch(&c[i]);
    ASSERT_TRUE(s[i]->Write(Block(1, 0, 0, true)));
    ASSERT_TRUE(s[i]->Read(&resp)) << i;  // open and served
  }
  // The same peer (every unix-socket client is one): a third stream is refused, though the
  // store as a whole has room.
  s[2] = stub->Fetch(&c[2]);
  EXPECT_FALSE(s[2]->Read(&resp));
  grpc::Status st = s[2]->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_NE(st.error_message().find("--max-streams-per-client"), std::string::npos)
      << st.error_message();
  EXPECT_EQ(server->metrics().rejected_streams->Value(), 1);
  // One closes: the client may open another.
  s[0]->WritesDone();
  while (s[0]->Read(&resp)) {
  }
  EXPECT_TRUE(s[0]->Finish().ok());
  ASSERT_TRUE(WaitFor([&] { return server->metrics().open_streams->Value() == 1; }));
  s[3] = stub->Fetch(&c[3]);
  ASSERT_TRUE(s[3]->Write(Block(2, 0, 1, true)));
  ASSERT_TRUE(s[3]->Read(&resp));
  EXPECT_EQ(resp.request_id(), 2u);
  for (int i : {1, 3}) {
    s[i]->WritesDone();
    while (s[i]->Read(&resp)) {
    }
    EXPECT_TRUE(s[i]->Finish().ok());
  }
}

TEST_F(StoreServiceTest, AStreamWithoutRequestsIsEndedAndTheClientReconnects) {
  StoreOptions so;
  so.idle_stream_timeout = std::chrono::milliseconds(200);
  auto server = Serve(so);
  {
    // A raw stream served once, then silent: the store ends it (OK: nothing was owed).
    auto channel = grpc::CreateChannel(server->target(), grpc::InsecureChannelCredentials());
    auto stub = v1::ExpertStore::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    auto stream = stub->Fetch(&ctx);
    ASSERT_TRUE(stream->Write(Block(1, 0, 0, true)));
    v1::FetchResponse resp;
    bool last = false;
    while (!last && stream->Read(&resp)) last = resp.has_chunk() && resp.chunk().last();
    ASSERT_TRUE(last);
    const auto silent_since = std::chrono::steady_clock::now();
    EXPECT_FALSE(stream->Read(&resp));  // ended by the store, well before the 20 s deadline
    const auto waited = std::chrono::steady_clock::now() - silent_since;
    EXPECT_TRUE(stream->Finish().ok());
    EXPECT_GE(waited, std::chrono::milliseconds(150));
    EXPECT_LT(waited, std::chrono::seconds(10));
    EXPECT_EQ(server->metrics().idle_streams_closed->Value(), 1);
  }
  // A silent stream that never sent anything is ended too.
  {
    auto channel = grpc::CreateChannel(server->target(), grpc::InsecureChannelCredentials());
    auto stub = v1::ExpertStore::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    auto stream = stub->Fetch(&ctx);
    v1::FetchResponse resp;
    EXPECT_FALSE(stream->Read(&resp));
    EXPECT_TRUE(stream->Finish().ok());
    EXPECT_EQ(server->metrics().idle_streams_closed->Value(), 2);
  }
  ASSERT_TRUE(WaitFor([&] { return server->metrics().open_streams->Value() == 0; }));
  // RemoteStoreSource opens a new stream for its next fetch; the store is not taken for down.
  auto src = rpc::RemoteStoreSource::Connect(Client(*server), &container_->manifest());
  ASSERT_TRUE(src.ok()) << src.status();
  std::atomic<bool> broken{false};
  (*src)->OnStreamBroken([&](const absl::Status&) { broken = true; });
  auto first = (*src)->Fetch({0, 2}, Priority::kDemand);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(WaitFor([&] { return server->metrics().idle_streams_closed->Value() == 3; }));
  auto second = (*src)->Fetch({1, 3}, Priority::kDemand);
  ASSERT_TRUE(second.ok()) << second.status();
  ExpectBlock(*second, 1, 3);
  EXPECT_EQ((*src)->Stats().reconnects, 1u);
  EXPECT_FALSE(broken);
}

TEST_F(StoreServiceTest, ABatchIsAnsweredPerRequestDemandFirst) {
  auto server = ServeOneReadAtATime(256 << 10);  // ~40 ms a block
  v1::FetchRequest batch;
  for (const auto& r :
       {Block(1, 0, 0, false), Block(2, 0, 1, false), Block(3, 1, 9, true), Block(4, 1, 7, true)}) {
    *batch.mutable_batch()->add_blocks() = r.block();
  }
  auto answers = RawExchange(*server, {batch}, 4);
  ASSERT_EQ(answers.size(), 4u);
  std::vector<uint64_t> order;
  for (const auto& a : answers) order.push_back(a.id);
  // Demand first; the missing expert is answered on its own, the others are served.
  EXPECT_EQ(order, (std::vector<uint64_t>{3, 4, 1, 2}));
  EXPECT_EQ(answers[0].code, absl::StatusCode::kNotFound) << answers[0].message;
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(answers[i].code, absl::StatusCode::kOk) << i;
  EXPECT_EQ(server->metrics().blocks_served_demand->Value(), 1);
  EXPECT_EQ(server->metrics().blocks_served_prefetch->Value(), 2);
}

TEST_F(StoreServiceTest, EmptyAndOversizedBatchesGetTheStreamsError) {
  auto server = Serve();
  v1::FetchRequest empty;
  empty.mutable_batch();
  v1::FetchRequest big;
  for (int i = 0; i < 4097; ++i)
    *big.mutable_batch()->add_blocks() = Block(100 + i, 0, 0, true).block();
  auto answers = RawExchange(*server, {empty, big, Block(7, 1, 2, true)}, 3);
  ASSERT_EQ(answers.size(), 3u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(answers[i].id, 0u);
    EXPECT_EQ(answers[i].code, absl::StatusCode::kInvalidArgument);
    EXPECT_NE(answers[i].message.find(i == 0 ? "holds 0" : "holds 4097"), std::string::npos)
        << answers[i].message;
  }
  // The stream goes on.
  EXPECT_EQ(answers[2].id, 7u);
  EXPECT_EQ(answers[2].code, absl::StatusCode::kOk) << answers[2].message;
}

TEST_F(StoreServiceTest, PromoteMovesAQueuedPrefetchAhead) {
  auto server = ServeOneReadAtATime(256 << 10);  // ~40 ms a block
  v1::FetchRequest promote;
  promote.mutable_promote()->add_request_ids(3);
  promote.mutable_promote()->add_request_ids(42);  // unknown: ignored
  auto answers = RawExchange(
      *server, {Block(1, 0, 0, false), Block(2, 0, 1, false), Block(3, 0, 2, false), promote}, 3);
  ASSERT_EQ(answers.size(), 3u);
  std::vector<uint64_t> order;
  for (const auto& a : answers) {
    EXPECT_EQ(a.code, absl::StatusCode::kOk) << a.message;
    order.push_back(a.id);
  }
  EXPECT_EQ(order, (std::vector<uint64_t>{1, 3, 2}));
  EXPECT_EQ(server->metrics().blocks_served_demand->Value(), 1);  // the promoted one
}

TEST_F(StoreServiceTest, OneCancelMessageCancelsSeveralRequests) {
  auto server = ServeOneReadAtATime(128 << 10);  // ~80 ms a block
  v1::FetchRequest cancel = Cancel(2);
  cancel.mutable_cancel()->add_more_request_ids(3);
  cancel.mutable_cancel()->add_more_request_ids(1);
  cancel.mutable_cancel()->add_more_request_ids(99);
  auto answers = RawExchange(*server,
                             {Block(1, 0, 0, false), Block(2, 0, 1, false), Block(3, 0, 2, false),
                              cancel, Block(4, 1, 1, true)},
                             4);
  ASSERT_EQ(answers.size(), 4u);
  std::map<uint64_t, absl::StatusCode> codes;
  for (const auto& a : answers) codes[a.id] = a.code;
  EXPECT_EQ(codes[1], absl::StatusCode::kCancelled);  // in flight: when its read ended
  EXPECT_EQ(codes[2], absl::StatusCode::kCancelled);
  EXPECT_EQ(codes[3], absl::StatusCode::kCancelled);
  EXPECT_EQ(codes[4], absl::StatusCode::kOk);
  EXPECT_EQ(server->metrics().cancellations->Value(), 3);
}

TEST(StoreMetricsTest, PerClientSeriesAreBounded) {
  StoreMetrics m(std::make_shared<prometheus::Registry>());
  prometheus::Counter* a = m.ClientBytes("compute-a");
  EXPECT_EQ(m.ClientBytes("compute-a"), a);
  for (int i = 0; i < 1000; ++i) m.ClientBytes("spoofed-" + std::to_string(i));
  EXPECT_EQ(m.client_series(), StoreMetrics::kMaxClientSeries + 1);
  prometheus::Counter* other = m.ClientBytes("yet-another");
  EXPECT_EQ(m.ClientBytes("spoofed-999"), other);
  EXPECT_EQ(m.client_series(), StoreMetrics::kMaxClientSeries + 1);
  EXPECT_EQ(m.ClientBytes("compute-a"), a);  // the first clients keep their own series
  // A long name never gets a series of its own, even with room left.
  StoreMetrics fresh(std::make_shared<prometheus::Registry>());
  EXPECT_NE(fresh.ClientBytes(std::string(1000, 'x')), fresh.ClientBytes("short"));
  EXPECT_EQ(fresh.client_series(), 2u);
  size_t series = 0;
  for (const auto& family : fresh.registry->Collect()) {
    if (family.name == "colibri_store_client_bytes_served_total") series = family.metric.size();
  }
  EXPECT_EQ(series, 2u);
}

TEST_F(StoreServiceTest, ListModelsAdvertisesPartialCopies) {
  const std::vector<fs::path> part = {dir_.path() / "p0"};
  ImportOptions o;
  o.stripe_size = 8192;
  o.first_layer = 1;
  o.last_layer = 1;
  ASSERT_TRUE(ImportModel(model_dir_, StoreLocation{part, {}}, o).ok());
  auto server = Serve({}, nullptr, "part", part);
  auto src = rpc::RemoteStoreSource::Connect(Client(*server), &container_->manifest());
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_FALSE((*src)->full_copy());
  EXPECT_FALSE((*src)->Holds({0, 3}));
  EXPECT_TRUE((*src)->Holds({1, 3}));
  auto r = (*src)->Fetch({0, 3}, Priority::kDemand);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("not held"), std::string::npos) << r.status();
}

TEST_F(StoreServiceTest, SeveralStoresSpreadReadsAndSurviveADeath) {
  // Store B holds a copy on its own disks.
  const std::vector<fs::path> disks_b = {dir_.path() / "b0", dir_.path() / "b1"};
  ImportOptions o;
  o.stripe_size = 8192;
  ASSERT_TRUE(ImportModel(model_dir_, StoreLocation{disks_b, {}}, o).ok());
  FaultInjector slow_a, slow_b;
  auto a = Serve({}, &slow_a, "a");
  auto b = Serve({}, &slow_b, "b", disks_b);
  rpc::MultiStoreOptions mo;
  mo.targets = {a->target(), b->target()};
  mo.model = "tiny";
  mo.probe_interval = std::chrono::milliseconds(50);
  auto multi = rpc::MultiStoreSource::Connect(mo, &container_->manifest());
  ASSERT_TRUE(multi.ok()) << multi.status();
  const auto ids = AllIds();
  FetchAllAndCheck(**multi, ids);
  auto states = (*multi)->Stores();
  ASSERT_EQ(states.size(), 2u);
  EXPECT_GT(states[0].stats.blocks, 0u);  // both stores took reads
  EXPECT_GT(states[1].stats.blocks, 0u);
  EXPECT_EQ(states[0].stats.blocks + states[1].stats.blocks, ids.size());

  // Reads are spread by each store's measured rate: make B look slow for a moment so that A,
  // the faster one on record, takes reads in the next round whatever the machine's load did to
  // the first one.
  slow_b.SetDiskBandwidth(0, 1 << 20);
  slow_b.SetDiskBandwidth(1, 1 << 20);
  FetchAllAndCheck(**multi, ids);
  slow_b.Clear();

  // Store A becomes very slow, then dies with requests in flight: they finish from B.
  slow_a.SetDiskBandwidth(0, 64 << 10);
  slow_a.SetDiskBandwidth(1, 64 << 10);
  std::atomic<int> got{0};
  std::thread killer([&] {
    // Wait until A has work in flight, then kill it.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while ((*multi)->Stores()[0].stats.outstanding_bytes == 0 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    a->Stop();
  });
  absl::Status st = (*multi)->FetchMany(ids, [&](size_t i, Lease l) {
    ExpectBlock(l, ids[i].layer, ids[i].expert);
    got++;
  });
  killer.join();
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(got.load(), static_cast<int>(ids.size()));
  EXPECT_GT((*multi)->failovers(), 0u);
  EXPECT_FALSE((*multi)->Stores()[0].up);
}

TEST_F(StoreServiceTest, BlocksAreReadInPartsFromSeveralStoresAndVerifiedWhole) {
  const std::vector<fs::path> disks_b = {dir_.path() / "b0"};
  ImportOptions o;
  o.stripe_size = 8192;
  ASSERT_TRUE(ImportModel(model_dir_, StoreLocation{disks_b, {}}, o).ok());
  auto a = Serve({}, nullptr, "a");
  auto b = Serve({}, nullptr, "b", disks_b);
  rpc::MultiStoreOptions mo;
  mo.targets = {a->target(), b->target()};
  mo.model = "tiny";
  mo.split_min_bytes = 4096;  // the tiny blocks (~19 KiB) split in two
  auto multi = rpc::MultiStoreSource::Connect(mo, &container_->manifest());
  ASSERT_TRUE(multi.ok()) << multi.status();
  const auto ids = AllIds();
  FetchAllAndCheck(**multi, ids);
  EXPECT_EQ((*multi)->split_blocks(), ids.size());
  const auto states = (*multi)->Stores();
  uint64_t total = 0;
  for (const auto& id : ids) total += container_->manifest().Expert(id).size;
  EXPECT_GT(states[0].stats.bytes, 0u);  // every block came from both
  EXPECT_GT(states[1].stats.bytes, 0u);
  EXPECT_EQ(states[0].stats.bytes + states[1].stats.bytes, total);
  EXPECT_EQ((*multi)->failovers(), 0u);

  // A holder that sends wrong bytes for a part (a plain model directory does not verify
  // parts): the assembled block fails its checksum and is read whole from one store.
  const fs::path plain = dir_.path() / "plain";
  testing::CopyWithFlippedExpertByte(model_dir_, plain, container_->manifest(), 1, 2, 100);
  BlockStoreOptions bo;
  bo.model_dirs = {plain};
  auto bad = std::make_unique<TestServer>(bo, StoreOptions{}, (dir_.path() / "bad.sock").string());
  mo.targets = {bad->target(), b->target()};  // the bad copy takes the first part
  auto mixed = rpc::MultiStoreSource::Connect(mo, &container_->manifest());
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  auto got = (*mixed)->Fetch({1, 2}, Priority::kDemand);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectBlock(*got, 1, 2);
  EXPECT_EQ((*mixed)->split_blocks(), 0u);
  EXPECT_GE((*mixed)->failovers(), 1u);

  // split_min_bytes 0: whole blocks, one store each.
  mo.targets = {a->target(), b->target()};
  mo.split_min_bytes = 0;
  auto whole = rpc::MultiStoreSource::Connect(mo, &container_->manifest());
  ASSERT_TRUE(whole.ok()) << whole.status();
  FetchAllAndCheck(**whole, ids);
  EXPECT_EQ((*whole)->split_blocks(), 0u);
  const auto whole_states = (*whole)->Stores();
  EXPECT_EQ(whole_states[0].stats.blocks + whole_states[1].stats.blocks, ids.size());
}

TEST_F(StoreServiceTest, AStoreStartedLaterJoins) {
  const std::vector<fs::path> disks_b = {dir_.path() / "b0"};
  ImportOptions o;
  o.stripe_size = 8192;
  ASSERT_TRUE(ImportModel(model_dir_, StoreLocation{disks_b, {}}, o).ok());
  auto a = Serve({}, nullptr, "a");
  rpc::MultiStoreOptions mo;
  mo.targets = {a->target(), "unix:" + (dir_.path() / "late.sock").string()};
  mo.model = "tiny";
  mo.probe_interval = std::chrono::milliseconds(20);
  auto multi = rpc::MultiStoreSource::Connect(mo, &container_->manifest());
  ASSERT_TRUE(multi.ok()) << multi.status();
  EXPECT_FALSE((*multi)->Stores()[1].up);
  auto late = Serve({}, nullptr, "late", disks_b);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!(*multi)->Stores()[1].up && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  ASSERT_TRUE((*multi)->Stores()[1].up);
  const auto ids = AllIds();
  FetchAllAndCheck(**multi, ids);
  EXPECT_GT((*multi)->Stores()[1].stats.blocks, 0u);
}

TEST_F(StoreServiceTest, AddStoreRefusesDuplicatesBadTargetsAndPlaintextOffLoopback) {
  auto a = Serve({}, nullptr, "a");
  rpc::MultiStoreOptions mo;
  mo.targets = {a->target()};
  mo.model = "tiny";
  auto multi = rpc::MultiStoreSource::Connect(mo, &container_->manifest());
  ASSERT_TRUE(multi.ok()) << multi.status();
  EXPECT_EQ((*multi)->AddStore(a->target()).code(), absl::StatusCode::kAlreadyExists);
  for (const char* bad : {"", "store", "store:0", "store:70000", "unix:relative", "a b:5"}) {
    EXPECT_EQ((*multi)->AddStore(bad).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  // No transport given: plaintext, refused for a store that is not on this host.
  const absl::Status remote = (*multi)->AddStore("10.255.0.1:50051");
  EXPECT_EQ(remote.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(remote.message().find("--insecure"), std::string::npos) << remote;
  EXPECT_EQ((*multi)->Stores().size(), 1u);
  EXPECT_TRUE((*multi)->AddStore("unix:" + (dir_.path() / "later.sock").string()).ok());
  EXPECT_EQ((*multi)->Stores().size(), 2u);
  // Connect refuses the same targets.
  mo.targets = {a->target(), "10.255.0.1:50051"};
  EXPECT_EQ(rpc::MultiStoreSource::Connect(mo, &container_->manifest()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(StoreServiceTest, MissingModelAndUnreachableStoreAreClearErrors) {
  auto server = Serve();
  auto o = Client(*server);
  o.model = "other";
  auto src = rpc::RemoteStoreSource::Connect(o, &container_->manifest());
  EXPECT_EQ(src.status().code(), absl::StatusCode::kNotFound);
  rpc::MultiStoreOptions mo;
  mo.targets = {"unix:" + (dir_.path() / "nobody.sock").string()};
  mo.model = "tiny";
  auto multi = rpc::MultiStoreSource::Connect(mo, &container_->manifest());
  EXPECT_EQ(multi.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(multi.status().message().find("nobody.sock"), std::string::npos) << multi.status();
}

}  // namespace
}  // namespace colibri::store
