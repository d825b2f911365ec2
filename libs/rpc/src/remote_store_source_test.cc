// RemoteStoreSource and MultiStoreSource against a scripted in-process store: what travels on the
// Fetch stream for a batch, a priority, a promote and a cancel (and through a CacheTier above).
#include "colibri/rpc/remote_store_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "colibri/core/checksum.h"
#include "colibri/core/testing/wait.h"
#include "colibri/expert_source/cache_tier.h"
#include "colibri/rpc/multi_store_source.h"

namespace colibri::rpc {
namespace {

using expert_source::ExpertId;
using expert_source::Lease;
using expert_source::Priority;
constexpr auto kDeadline = std::chrono::seconds(10);
constexpr uint64_t kBlockBytes = 1000;
const ExpertId kA{0, 0}, kB{0, 1}, kC{1, 2}, kD{1, 3};

uint8_t Fill(ExpertId id) { return static_cast<uint8_t>(id.layer * 16 + id.expert + 1); }

std::string BlockBytes(ExpertId id) {
  return std::string(kBlockBytes, static_cast<char>(Fill(id)));
}

// Two MoE layers of four experts, 1000-byte blocks of Fill(id).
model::Manifest TinyManifest() {
  model::Manifest m;
  m.name = "tiny";
  m.config.n_layers = 2;
  m.config.n_experts = 4;
  for (int32_t l = 0; l < 2; ++l) {
    for (int32_t e = 0; e < 4; ++e) {
      model::ExpertBlock b;
      b.id = {l, e};
      b.size = kBlockBytes;
      b.padded_size = 4096;
      const std::string bytes = BlockBytes(ExpertId{l, e});
      b.checksum = Checksum64(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      m.experts.push_back(b);
    }
  }
  return m;
}

// Records every message of every Fetch stream. Demand requests are answered at once; with
// hold_prefetch, prefetch requests wait for a PromoteRequest (then answered) or a CancelRequest
// (then answered CANCELLED).
class ScriptedStore final : public v1::ExpertStore::Service {
 public:
  explicit ScriptedStore(bool hold_prefetch) : hold_prefetch_(hold_prefetch) {}

  grpc::Status Fetch(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::FetchResponse, v1::FetchRequest>* stream) override {
    v1::FetchRequest req;
    while (stream->Read(&req)) {
      std::vector<v1::BlockRequest> answer;
      std::vector<uint64_t> cancel;
      {
        std::lock_guard<std::mutex> lock(mu_);
        messages_.push_back(req);
        auto take = [&](const v1::BlockRequest& b) {
          if (hold_prefetch_ && b.priority() == v1::PRIORITY_PREFETCH) {
            held_[b.request_id()] = b;
          } else {
            answer.push_back(b);
          }
        };
        auto release = [&](uint64_t rid, bool cancelled) {
          auto it = held_.find(rid);
          if (it == held_.end()) return;
          if (cancelled) {
            cancel.push_back(rid);
          } else {
            answer.push_back(it->second);
          }
          held_.erase(it);
        };
        if (req.has_block()) take(req.block());
        if (req.has_batch()) {
          for (const auto& b : req.batch().blocks()) take(b);
        }
        if (req.has_promote()) {
          for (uint64_t rid : req.promote().request_ids()) release(rid, false);
        }
        if (req.has_cancel()) {
          release(req.cancel().request_id(), true);
          for (uint64_t rid : req.cancel().more_request_ids()) release(rid, true);
        }
        cv_.notify_all();
      }
      for (const auto& b : answer) {
        const ExpertId id{b.key().layer(), b.key().expert()};
        const std::string bytes = BlockBytes(id);
        const uint64_t sum =
            Checksum64(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
        v1::FetchResponse resp;
        resp.set_request_id(b.request_id());
        auto* c = resp.mutable_chunk();
        c->set_offset(0);
        c->set_data(bytes);
        c->set_chunk_checksum(sum);
        c->set_block_size(bytes.size());
        c->set_block_checksum(sum);
        c->set_last(true);
        stream->Write(resp);
      }
      for (uint64_t rid : cancel) {
        v1::FetchResponse resp;
        resp.set_request_id(rid);
        resp.mutable_error()->set_code(static_cast<int>(absl::StatusCode::kCancelled));
        resp.mutable_error()->set_message("cancelled by the client");
        stream->Write(resp);
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status ListModels(grpc::ServerContext*, const v1::ListModelsRequest*,
                          v1::ListModelsResponse* resp) override {
    auto* m = resp->add_models();
    m->set_name("tiny");
    m->set_n_layers(2);
    m->set_n_experts(4);
    m->set_full_copy(true);
    return grpc::Status::OK;
  }

  std::vector<v1::FetchRequest> Messages() const {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_;
  }
  // The messages carrying block requests (a BlockRequest or a BlockBatch).
  std::vector<v1::FetchRequest> Fetches() const {
    std::vector<v1::FetchRequest> out;
    for (const auto& m : Messages()) {
      if (m.has_block() || m.has_batch()) out.push_back(m);
    }
    return out;
  }
  bool WaitForMessages(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kDeadline, [&] { return messages_.size() >= n; });
  }
  bool WaitForHeld(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kDeadline, [&] { return held_.size() >= n; });
  }
  // The request id the client gave `id` (0: none seen).
  uint64_t RequestIdOf(ExpertId id) const {
    uint64_t rid = 0;
    for (const auto& m : Messages()) {
      auto look = [&](const v1::BlockRequest& b) {
        if (b.key().layer() == id.layer && b.key().expert() == id.expert) rid = b.request_id();
      };
      if (m.has_block()) look(m.block());
      for (const auto& b : m.batch().blocks()) look(b);
    }
    return rid;
  }

 private:
  const bool hold_prefetch_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<v1::FetchRequest> messages_;
  std::map<uint64_t, v1::BlockRequest> held_;
};

// A scripted store served on a unix socket.
class Served {
 public:
  explicit Served(bool hold_prefetch, const std::string& name = "s") : service_(hold_prefetch) {
    static std::atomic<int> counter{0};
    socket_ = absl::StrCat("/tmp/colibri_rss_", ::getpid(), "_", name, "_", counter++, ".sock");
    grpc::ServerBuilder b;
    b.AddListeningPort("unix:" + socket_, grpc::InsecureServerCredentials());
    b.RegisterService(&service_);
    server_ = b.BuildAndStart();
  }
  ~Served() {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
    ::unlink(socket_.c_str());
  }
  std::string target() const { return "unix:" + socket_; }
  ScriptedStore& store() { return service_; }

 private:
  ScriptedStore service_;
  std::string socket_;
  std::unique_ptr<grpc::Server> server_;
};

std::unique_ptr<RemoteStoreSource> Source(const Served& s, const model::Manifest* m) {
  RemoteStoreOptions o;
  o.target = s.target();
  o.model = "tiny";
  o.fetch_timeout = std::chrono::milliseconds(10000);
  auto src = RemoteStoreSource::Create(o, m);
  EXPECT_TRUE(src.ok()) << src.status();
  return std::move(*src);
}

std::set<std::pair<int32_t, int32_t>> IdsOf(const v1::FetchRequest& m) {
  std::set<std::pair<int32_t, int32_t>> out;
  auto add = [&](const v1::BlockRequest& b) { out.insert({b.key().layer(), b.key().expert()}); };
  if (m.has_block()) add(m.block());
  for (const auto& b : m.batch().blocks()) add(b);
  return out;
}

TEST(RemoteStoreSource, ABatchIsOneMessageAndPriorityTravels) {
  const model::Manifest manifest = TinyManifest();
  Served served(/*hold_prefetch=*/false);
  auto src = Source(served, &manifest);
  const std::vector<ExpertId> ids = {kA, kB, kC};
  std::set<size_t> got;
  absl::Status st = src->FetchMany(ids, [&](size_t i, Lease lease) {
    ASSERT_EQ(lease->size, kBlockBytes);
    EXPECT_EQ(lease->data()[0], Fill(ids[i]));
    EXPECT_EQ(lease->data()[kBlockBytes - 1], Fill(ids[i]));
    got.insert(i);
  });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(got, std::set<size_t>({0, 1, 2}));
  auto fetches = served.store().Fetches();
  ASSERT_EQ(fetches.size(), 1u);  // one message for the whole batch
  ASSERT_TRUE(fetches[0].has_batch());
  ASSERT_EQ(fetches[0].batch().blocks_size(), 3);
  for (const auto& b : fetches[0].batch().blocks()) {
    EXPECT_EQ(b.priority(), v1::PRIORITY_DEMAND);
    EXPECT_GT(b.timeout_ms(), 0u);
  }
  EXPECT_EQ(IdsOf(fetches[0]), (std::set<std::pair<int32_t, int32_t>>{{0, 0}, {0, 1}, {1, 2}}));

  // One block alone goes as a plain request, at the priority asked.
  auto lease = src->Fetch(kD, Priority::kPrefetch);
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_EQ((*lease)->data()[0], Fill(kD));
  fetches = served.store().Fetches();
  ASSERT_EQ(fetches.size(), 2u);
  ASSERT_TRUE(fetches[1].has_block());
  EXPECT_EQ(fetches[1].block().priority(), v1::PRIORITY_PREFETCH);
  std::vector<ExpertId> prefetch = {kA, kD};
  ASSERT_TRUE(src->FetchMany(
                     prefetch, [](size_t, Lease) {}, Priority::kPrefetch)
                  .ok());
  fetches = served.store().Fetches();
  ASSERT_EQ(fetches.size(), 3u);
  for (const auto& b : fetches[2].batch().blocks()) EXPECT_EQ(b.priority(), v1::PRIORITY_PREFETCH);
  EXPECT_EQ(src->Stats().blocks, 6u);
}

TEST(RemoteStoreSource, PromoteAndCancelNameTheRequestsInFlight) {
  const model::Manifest manifest = TinyManifest();
  Served served(/*hold_prefetch=*/true);
  auto src = Source(served, &manifest);
  const std::vector<ExpertId> ids = {kA, kB, kC};
  std::vector<size_t> got;
  absl::Status st = absl::UnknownError("not run");
  std::thread fetcher([&] {
    st = src->FetchMany(
        ids, [&](size_t i, Lease) { got.push_back(i); }, Priority::kPrefetch);
  });
  ASSERT_TRUE(served.store().WaitForHeld(3));
  const uint64_t rid_a = served.store().RequestIdOf(kA);
  const uint64_t rid_b = served.store().RequestIdOf(kB);
  const uint64_t rid_c = served.store().RequestIdOf(kC);
  const std::vector<ExpertId> promote = {kA, kD};  // kD: nothing in flight, nothing sent for it
  src->Promote(promote);
  const std::vector<ExpertId> cancel = {kB, kC};
  src->Cancel(cancel);
  fetcher.join();
  // A was answered after the promote; B and C were cancelled and skipped.
  EXPECT_EQ(got, std::vector<size_t>({0}));
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled) << st;
  const auto messages = served.store().Messages();
  ASSERT_EQ(messages.size(), 3u);  // the batch, one promote, one cancel
  ASSERT_TRUE(messages[1].has_promote());
  EXPECT_EQ(std::vector<uint64_t>(messages[1].promote().request_ids().begin(),
                                  messages[1].promote().request_ids().end()),
            std::vector<uint64_t>({rid_a}));
  ASSERT_TRUE(messages[2].has_cancel());
  std::set<uint64_t> cancelled = {messages[2].cancel().request_id()};
  for (uint64_t rid : messages[2].cancel().more_request_ids()) cancelled.insert(rid);
  EXPECT_EQ(cancelled, std::set<uint64_t>({rid_b, rid_c}));
  EXPECT_EQ(messages[2].cancel().more_request_ids_size(), 1);  // one message for both
  EXPECT_EQ(src->Stats().promoted, 1u);
  EXPECT_EQ(src->Stats().cancelled, 2u);
  // A demand request is never cancelled or promoted: nothing more is sent.
  ASSERT_TRUE(src->Fetch(kD, Priority::kDemand).ok());
  src->Cancel(std::vector<ExpertId>{kD});
  src->Promote(std::vector<ExpertId>{kD});
  EXPECT_EQ(served.store().Messages().size(), 4u);
}

// A cache tier over the remote source: its misses travel as one batch, a demand for a prefetch
// in flight as a promote, a cancelled prefetch as a cancel.
TEST(RemoteStoreSource, ACacheTierAboveSendsBatchesPromotesAndCancels) {
  const model::Manifest manifest = TinyManifest();
  Served served(/*hold_prefetch=*/true);
  auto src = Source(served, &manifest);
  expert_source::CacheTierOptions o;
  o.capacity_bytes = 8 * 4096;
  o.io_threads = 2;
  expert_source::CacheTier tier(src.get(), o);
  const std::vector<ExpertId> misses = {kA, kB, kC};
  std::set<size_t> got;
  ASSERT_TRUE(tier.FetchMany(misses, [&](size_t i, Lease) { got.insert(i); }).ok());
  EXPECT_EQ(got.size(), 3u);
  auto fetches = served.store().Fetches();
  ASSERT_EQ(fetches.size(), 1u);
  ASSERT_EQ(fetches[0].batch().blocks_size(), 3);

  // A prefetch the store holds; a demand request for it sends a promote.
  const std::vector<ExpertId> d = {kD};
  tier.Prefetch(d);
  ASSERT_TRUE(served.store().WaitForHeld(1));
  auto lease = tier.Fetch(kD, Priority::kDemand);
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_EQ((*lease)->data()[0], Fill(kD));
  EXPECT_EQ(src->Stats().promoted, 1u);
  EXPECT_EQ(tier.Stats().in_flight_hits, 1u);

  // A prefetch nobody wants any more: the cancel reaches the store, the read is aborted.
  ASSERT_TRUE(tier.Clear().blocks > 0);
  lease->reset();
  const std::vector<ExpertId> b = {kB};
  tier.Prefetch(b);
  ASSERT_TRUE(served.store().WaitForHeld(1));
  tier.Cancel(b);
  ASSERT_TRUE(tier.WaitIdle(std::chrono::steady_clock::now() + kDeadline));
  EXPECT_EQ(src->Stats().cancelled, 1u);
  EXPECT_EQ(tier.Stats().prefetch_aborted, 1u);
  EXPECT_FALSE(tier.Contains(kB));
  const auto messages = served.store().Messages();
  EXPECT_TRUE(messages.back().has_cancel());
  EXPECT_EQ(messages.back().cancel().request_id(), served.store().RequestIdOf(kB));
}

TEST(MultiStoreSource, ABatchIsSplitByHolderAndAdviceGoesToTheHolder) {
  const model::Manifest manifest = TinyManifest();
  Served one(/*hold_prefetch=*/true, "a"), two(/*hold_prefetch=*/true, "b");
  MultiStoreOptions o;
  o.targets = {one.target(), two.target()};
  o.model = "tiny";
  o.fetch_timeout = std::chrono::milliseconds(10000);
  auto multi = MultiStoreSource::Connect(o, &manifest);
  ASSERT_TRUE(multi.ok()) << multi.status();
  std::vector<ExpertId> all;
  for (int32_t l = 0; l < 2; ++l) {
    for (int32_t e = 0; e < 4; ++e) all.push_back(ExpertId{l, e});
  }
  std::set<size_t> got;
  ASSERT_TRUE((*multi)
                  ->FetchMany(all,
                              [&](size_t i, Lease lease) {
                                EXPECT_EQ(lease->data()[0], Fill(all[i]));
                                got.insert(i);
                              })
                  .ok());
  EXPECT_EQ(got.size(), all.size());
  // One message per store, together the whole batch, each store a share of it.
  const auto f1 = one.store().Fetches(), f2 = two.store().Fetches();
  ASSERT_EQ(f1.size(), 1u);
  ASSERT_EQ(f2.size(), 1u);
  auto ids = IdsOf(f1[0]);
  const auto ids2 = IdsOf(f2[0]);
  EXPECT_FALSE(ids.empty());
  EXPECT_FALSE(ids2.empty());
  ids.insert(ids2.begin(), ids2.end());
  EXPECT_EQ(ids.size(), all.size());

  // A prefetch held by whichever store got it: the promote goes to that store only.
  std::atomic<bool> done{false};
  std::thread fetcher([&] {
    EXPECT_TRUE((*multi)->Fetch(kC, Priority::kPrefetch).ok());
    done = true;
  });
  ScriptedStore* holder = nullptr;
  colibri::testing::WaitUntil(
      [&] {
        if (one.store().Fetches().size() == 2) holder = &one.store();
        if (two.store().Fetches().size() == 2) holder = &two.store();
        return holder != nullptr;
      },
      kDeadline);
  ASSERT_NE(holder, nullptr);
  ScriptedStore* other = holder == &one.store() ? &two.store() : &one.store();
  ASSERT_TRUE(holder->WaitForHeld(1));
  (*multi)->Promote(std::vector<ExpertId>{kC});
  fetcher.join();
  EXPECT_TRUE(done.load());
  EXPECT_TRUE(holder->Messages().back().has_promote());
  for (const auto& m : other->Messages()) EXPECT_FALSE(m.has_promote());
}

}  // namespace
}  // namespace colibri::rpc
