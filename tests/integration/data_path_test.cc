// The data path end to end, in process: CacheTier → RemoteStoreSource → ExpertStoreService over
// gRPC (unix socket) → BlockStore → rate-capped disks. What the cache asks arrives at the store
// as it was meant: a request's misses as one BlockBatch, a demanded prefetch as a promote, an
// unwanted one as a cancel (counted by the store and seen on the wire).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "../../libs/store/src/store_test_util.h"
#include "colibri/core/testing/wait.h"
#include "colibri/expert_source/cache_tier.h"
#include "colibri/rpc/remote_store_source.h"
#include "colibri/store/fault_injection.h"
#include "colibri/store/ingest.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/server_interceptor.h"
#include "store_service.h"

namespace colibri::store {
namespace {

namespace fs = std::filesystem;
using expert_source::ExpertId;
using expert_source::Lease;
using expert_source::Priority;
constexpr auto kDeadline = std::chrono::seconds(20);

// Every FetchRequest the store's Fetch streams received, by kind.
struct Wire {
  std::mutex mu;
  std::vector<v1::FetchRequest> messages;
  size_t Count(v1::FetchRequest::KindCase kind) {
    std::lock_guard<std::mutex> lock(mu);
    size_t n = 0;
    for (const auto& m : messages) n += m.kind_case() == kind;
    return n;
  }
  std::vector<v1::FetchRequest> Of(v1::FetchRequest::KindCase kind) {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<v1::FetchRequest> out;
    for (const auto& m : messages) {
      if (m.kind_case() == kind) out.push_back(m);
    }
    return out;
  }
};

class Recorder final : public grpc::experimental::Interceptor {
 public:
  explicit Recorder(Wire* wire) : wire_(wire) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::POST_RECV_MESSAGE)) {
      if (const void* m = methods->GetRecvMessage()) {
        std::lock_guard<std::mutex> lock(wire_->mu);
        wire_->messages.push_back(*static_cast<const v1::FetchRequest*>(m));
      }
    }
    methods->Proceed();
  }

 private:
  Wire* wire_;
};

class RecorderFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RecorderFactory(Wire* wire) : wire_(wire) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    if (std::string(info->method()) != "/colibri.v1.ExpertStore/Fetch") return nullptr;
    return new Recorder(wire_);
  }

 private:
  Wire* wire_;
};

bool WaitUntil(const std::function<bool()>& done) {
  return ::colibri::testing::WaitUntil(done, kDeadline);
}

TEST(DataPath, BatchesPromotesAndCancelsReachTheStore) {
  testing::ScratchDir dir("colibri_data_path");
  const fs::path model_dir = dir.path() / "model";
  testing::WriteTinyModel(model_dir, "tiny", 2, 8);
  auto container = model::Container::Open(model_dir);
  ASSERT_TRUE(container.ok()) << container.status();
  const std::vector<fs::path> disks = {dir.path() / "d0", dir.path() / "d1"};
  ImportOptions io;
  io.stripe_size = 8192;
  ASSERT_TRUE(ImportModel(model_dir, StoreLocation{disks, {}}, io).ok());

  // One read at a time on slow disks: what is sent together queues behind the first read.
  FaultInjector slow;
  slow.SetDiskBandwidth(0, 256 << 10);
  slow.SetDiskBandwidth(1, 256 << 10);
  BlockStoreOptions bo;
  bo.disks = disks;
  bo.io.faults = &slow;
  auto block_store = BlockStore::Open(bo);
  ASSERT_TRUE(block_store.ok()) << block_store.status();
  auto registry = std::make_shared<prometheus::Registry>();
  StoreMetrics metrics(registry);
  StoreOptions so;
  so.max_reads_in_flight = 1;
  ExpertStoreService service(block_store->get(), so, &metrics);
  Wire wire;
  grpc::ServerBuilder b;
  const std::string socket = (dir.path() / "store.sock").string();
  b.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
  b.RegisterService(&service);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> hooks;
  hooks.push_back(std::make_unique<RecorderFactory>(&wire));
  b.experimental().SetInterceptorCreators(std::move(hooks));
  auto server = b.BuildAndStart();
  ASSERT_NE(server, nullptr);

  rpc::RemoteStoreOptions ro;
  ro.target = "unix:" + socket;
  ro.model = "tiny";
  ro.fetch_timeout = kDeadline;
  auto src = rpc::RemoteStoreSource::Connect(ro, &(*container)->manifest());
  ASSERT_TRUE(src.ok()) << src.status();
  expert_source::CacheTierOptions co;
  co.capacity_bytes = 64ull << 20;
  co.io_threads = 2;
  co.max_prefetch_reads = 8;
  expert_source::CacheTier tier(src->get(), co);

  // A request's three misses: one BlockBatch, served at demand priority.
  const std::vector<ExpertId> misses = {{0, 0}, {0, 1}, {1, 2}};
  size_t got = 0;
  ASSERT_TRUE(tier.FetchMany(misses, [&](size_t, Lease) { got++; }).ok());
  EXPECT_EQ(got, 3u);
  ASSERT_EQ(wire.Count(v1::FetchRequest::kBatch), 1u);
  EXPECT_EQ(wire.Count(v1::FetchRequest::kBlock), 0u);
  EXPECT_EQ(wire.Of(v1::FetchRequest::kBatch)[0].batch().blocks_size(), 3);
  EXPECT_EQ(metrics.blocks_served_demand->Value(), 3);

  // Three prefetches in one batch; a demand for the last, still queued behind the first read,
  // is promoted at the store (served and counted as demand).
  const std::vector<ExpertId> predicted = {{0, 3}, {0, 4}, {1, 5}};
  tier.Prefetch(predicted);
  ASSERT_TRUE(WaitUntil([&] { return wire.Count(v1::FetchRequest::kBatch) == 2; }));
  auto lease = tier.Fetch({1, 5}, Priority::kDemand);
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_EQ(wire.Count(v1::FetchRequest::kPromote), 1u);
  EXPECT_EQ(wire.Of(v1::FetchRequest::kPromote)[0].promote().request_ids_size(), 1);
  ASSERT_TRUE(tier.WaitIdle(std::chrono::steady_clock::now() + kDeadline));
  EXPECT_EQ(metrics.blocks_served_demand->Value(), 4);
  EXPECT_EQ(metrics.blocks_served_prefetch->Value(), 2);

  // Two prefetches, the second no longer wanted while it waits at the store: cancelled there.
  const std::vector<ExpertId> more = {{1, 6}, {1, 7}};
  tier.Prefetch(more);
  ASSERT_TRUE(WaitUntil([&] { return wire.Count(v1::FetchRequest::kBatch) == 3; }));
  const std::vector<ExpertId> wrong = {{1, 7}};
  tier.Cancel(wrong);
  ASSERT_TRUE(tier.WaitIdle(std::chrono::steady_clock::now() + kDeadline));
  ASSERT_EQ(wire.Count(v1::FetchRequest::kCancel), 1u);
  EXPECT_EQ(metrics.cancellations->Value(), 1);
  EXPECT_EQ(metrics.blocks_served_prefetch->Value(), 3);  // {1, 6} only
  EXPECT_TRUE(tier.Contains({1, 6}));
  EXPECT_FALSE(tier.Contains({1, 7}));
  EXPECT_EQ(tier.Stats().prefetch_aborted, 1u);
  EXPECT_EQ((*src)->Stats().promoted, 1u);
  EXPECT_EQ((*src)->Stats().cancelled, 1u);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
}

}  // namespace
}  // namespace colibri::store
