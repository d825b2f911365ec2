#include "store_service.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "colibri/rpc/shm_region.h"
#include "colibri/rpc/status.h"

namespace colibri::store {

using Clock = std::chrono::steady_clock;
using expert_source::Priority;

namespace {

// The peer host (what stream quotas count by; a header could be anything): "unix" for every
// unix-socket peer.
std::string PeerHost(grpc::CallbackServerContext* ctx) {
  const std::string peer = ctx->peer();
  if (peer.rfind("unix:", 0) == 0) return "unix";
  const auto colon = peer.rfind(':');  // ipv4:1.2.3.4:port, ipv6:[::1]:port
  return colon == std::string::npos ? peer : peer.substr(0, colon);
}

// The label for per-client metrics: the client's colibri-client header, else the peer host.
std::string ClientName(grpc::CallbackServerContext* ctx) {
  const auto& md = ctx->client_metadata();
  auto it = md.find("colibri-client");
  if (it != md.end()) return std::string(it->second.data(), it->second.size());
  return PeerHost(ctx);
}

}  // namespace

// Adapts one Fetch stream to its FetchScheduler: client messages in, answers out, metrics.
class ExpertStoreService::FetchReactor final
    : public grpc::ServerBidiReactor<v1::FetchRequest, v1::FetchResponse>,
      private FetchSink,
      private FetchObserver {
 public:
  FetchReactor(ExpertStoreService* svc, grpc::CallbackServerContext* ctx)
      : svc_(svc),
        ctx_(ctx),
        peer_(PeerHost(ctx)),
        unix_peer_(ctx->peer().rfind("unix:", 0) == 0),
        client_bytes_(svc->metrics_->ClientBytes(ClientName(ctx))),
        scheduler_(&svc->reads_, this, this, svc->limits_) {
    std::lock_guard<std::mutex> reactors(
        svc_->reactors_mu_);  // the idle thread waits for the start
    svc_->reactors_++;
    svc_->live_.insert(this);
    if (svc_->open_streams_.fetch_add(1) >= svc_->options_.max_streams) {
      svc_->open_streams_--;
      Reject(absl::StrCat("expert store: more than ", svc_->options_.max_streams,
                          " Fetch streams are open"));
      return;
    }
    if (!svc_->AddPeerStream(peer_)) {
      svc_->open_streams_--;
      Reject(absl::StrCat("expert store: client ", peer_, " already has ",
                          svc_->options_.max_streams_per_client,
                          " Fetch streams open (--max-streams-per-client)"));
      return;
    }
    counted_ = true;
    svc_->metrics_->open_streams->Increment();
    StartRead(&request_);
  }

  ~FetchReactor() override {
    shm_.reset();  // unmapped once no read writes into it
    std::lock_guard<std::mutex> lock(svc_->reactors_mu_);
    svc_->reactors_--;
    svc_->live_.erase(this);
    svc_->reactors_cv_.notify_all();
  }

  // Called by the service's idle thread (under reactors_mu_, so the reactor is alive).
  void ExpireIfIdle(Clock::time_point now, std::chrono::milliseconds timeout) {
    scheduler_.ExpireIfIdle(now, timeout);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      scheduler_.ClientDone();
      return;
    }
    switch (request_.kind_case()) {
      case v1::FetchRequest::kBlock: scheduler_.Submit(FromProto(request_.block())); break;
      case v1::FetchRequest::kBatch: {
        std::vector<FetchBlock> blocks;
        blocks.reserve(static_cast<size_t>(request_.batch().blocks_size()));
        for (const auto& b : request_.batch().blocks()) blocks.push_back(FromProto(b));
        scheduler_.SubmitBatch(blocks);
        break;
      }
      case v1::FetchRequest::kCancel: {
        std::vector<uint64_t> ids = {request_.cancel().request_id()};
        ids.insert(ids.end(), request_.cancel().more_request_ids().begin(),
                   request_.cancel().more_request_ids().end());
        scheduler_.Cancel(ids);
        break;
      }
      case v1::FetchRequest::kPromote: {
        const std::vector<uint64_t> ids(request_.promote().request_ids().begin(),
                                        request_.promote().request_ids().end());
        scheduler_.Promote(ids);
        break;
      }
      case v1::FetchRequest::kShmAttach: Attach(request_.shm_attach()); break;
      default: scheduler_.Skip(); break;
    }
  }

  void OnWriteDone(bool ok) override { scheduler_.WriteDone(ok); }
  void OnCancel() override { scheduler_.Broken(); }

  void OnDone() override {
    // The bookkeeping first: once the scheduler is done, the last read may delete this.
    if (counted_) {
      svc_->open_streams_--;
      svc_->RemovePeerStream(peer_);
      svc_->metrics_->open_streams->Decrement();
    }
    if (scheduler_.Done()) delete this;
  }

 private:
  static FetchBlock FromProto(const v1::BlockRequest& b) {
    FetchBlock f;
    f.request_id = b.request_id();
    f.model = b.key().model();
    f.id = {b.key().layer(), b.key().expert()};
    f.priority = b.priority() == v1::PRIORITY_PREFETCH ? Priority::kPrefetch : Priority::kDemand;
    f.timeout_ms = b.timeout_ms();
    f.has_shm_offset = b.has_shm_offset();
    f.shm_offset = b.shm_offset();
    f.range_begin = b.range_begin();
    f.range_end = b.range_end();
    return f;
  }

  void Reject(const std::string& why) {
    svc_->metrics_->rejected_streams->Increment();
    scheduler_.Refuse(absl::ResourceExhaustedError(why));
  }

  // Maps the client's region; the scheduler answers ShmAttached.
  void Attach(const v1::ShmAttach& a) {
    std::string why;
    if (shm_) {
      why = "a shared-memory region is already attached to this stream";
    } else if (!svc_->options_.allow_shm) {
      why = "shared memory is disabled on this store (--no-shm)";
    } else if (!unix_peer_) {
      why = "shared memory needs a unix-socket connection";
    } else {
      auto region = rpc::ShmRegion::Attach(a.name(), a.size());
      if (region.ok()) {
        shm_ = std::move(*region);
        scheduler_.Attached(true, "", shm_->data(), shm_->size());
        return;
      }
      why = std::string(region.status().message());
    }
    scheduler_.Attached(false, why, nullptr, 0);
  }

  // FetchSink (under the scheduler's lock).
  void Write(const FetchAnswer& a) override {
    // A chunk after a chunk reuses the message and its data string: clearing the oneof would
    // free the string, and every chunk would then fault a fresh 1-4 MiB allocation in.
    if (a.kind != FetchAnswer::Kind::kChunk || !current_.has_chunk()) current_.Clear();
    current_.set_request_id(a.request_id);
    switch (a.kind) {
      case FetchAnswer::Kind::kChunk: {
        auto* c = current_.mutable_chunk();
        c->set_offset(a.offset);
        c->set_data(a.data, a.length);
        c->set_chunk_checksum(a.chunk_checksum);
        c->set_block_size(a.block_size);
        c->set_block_checksum(a.block_checksum);
        c->set_last(a.last);
        break;
      }
      case FetchAnswer::Kind::kError:
        current_.mutable_error()->set_code(static_cast<int>(a.error.code()));
        current_.mutable_error()->set_message(std::string(a.error.message()));
        break;
      case FetchAnswer::Kind::kShmBlock: {
        auto* d = current_.mutable_shm_block();
        d->set_offset(a.shm_offset);
        d->set_block_size(a.block_size);
        d->set_block_checksum(a.block_checksum);
        break;
      }
      case FetchAnswer::Kind::kShmAttached:
        current_.mutable_shm_attached()->set_ok(a.attach_ok);
        current_.mutable_shm_attached()->set_message(a.attach_message);
        break;
    }
    StartWrite(&current_);
  }
  void ReadNext() override { StartRead(&request_); }
  void Finish(const absl::Status& status) override {
    ServerBidiReactor::Finish(rpc::ToGrpc(status));
  }
  void Abort() override { ctx_->TryCancel(); }
  void Released() override { delete this; }

  // FetchObserver (under the scheduler's lock).
  void QueuedChanged(int64_t delta) override { Add(svc_->metrics_->queued_requests, delta); }
  void ReadsInFlightChanged(int64_t delta) override { Add(svc_->metrics_->reads_in_flight, delta); }
  void Rejected() override { svc_->metrics_->rejected_requests->Increment(); }
  void Cancelled() override { svc_->metrics_->cancellations->Increment(); }
  void DeadlineExceeded() override { svc_->metrics_->deadline_exceeded->Increment(); }
  void Failed(const absl::Status& status) override {
    auto& m = *svc_->metrics_;
    (IsChecksumMismatch(status) ? m.checksum_failures : m.read_errors)->Increment();
  }
  void Served(bool demand, uint64_t bytes, bool shm) override {
    auto& m = *svc_->metrics_;
    (demand ? m.blocks_served_demand : m.blocks_served_prefetch)->Increment();
    m.bytes_served->Increment(static_cast<double>(bytes));
    client_bytes_->Increment(static_cast<double>(bytes));
    if (shm) m.shm_bytes_served->Increment(static_cast<double>(bytes));
  }
  void IdleEnded() override { svc_->metrics_->idle_streams_closed->Increment(); }
  void ReadTime(bool demand, double seconds) override {
    auto& m = *svc_->metrics_;
    (demand ? m.read_seconds_demand : m.read_seconds_prefetch)->Observe(seconds);
  }
  static void Add(prometheus::Gauge* g, int64_t delta) {
    if (delta > 0) g->Increment(static_cast<double>(delta));
    if (delta < 0) g->Decrement(static_cast<double>(-delta));
  }

  ExpertStoreService* svc_;
  grpc::CallbackServerContext* ctx_;  // valid until OnDone
  const std::string peer_;            // the quota's key
  const bool unix_peer_;
  prometheus::Counter* client_bytes_;
  bool counted_ = false;
  v1::FetchRequest request_;             // being read (one read outstanding)
  v1::FetchResponse current_;            // being written (one write outstanding)
  std::unique_ptr<rpc::ShmRegion> shm_;  // outlives every read into it (deleted with the reactor)
  FetchScheduler scheduler_;
};

ExpertStoreService::ExpertStoreService(BlockStore* store, StoreOptions options,
                                       StoreMetrics* metrics)
    : store_(store), options_(options), metrics_(metrics), reads_(store) {
  limits_.chunk_bytes = options_.chunk_bytes;
  limits_.max_queued = options_.max_queued;
  limits_.max_buffered_bytes = options_.max_buffered_bytes;
  limits_.max_reads_in_flight = options_.max_reads_in_flight;
  if (options_.idle_stream_timeout.count() > 0) idle_thread_ = std::thread([this] { IdleLoop(); });
}

ExpertStoreService::~ExpertStoreService() {
  std::unique_lock<std::mutex> lock(reactors_mu_);
  stopping_ = true;
  reactors_cv_.notify_all();
  reactors_cv_.wait(lock, [&] { return reactors_ == 0; });
  lock.unlock();
  if (idle_thread_.joinable()) idle_thread_.join();
}

void ExpertStoreService::IdleLoop() {
  // Checked a few times per timeout (at most every second), so a stream ends within about a
  // quarter of the timeout after it.
  const auto period = std::clamp<std::chrono::milliseconds>(
      options_.idle_stream_timeout / 4, std::chrono::milliseconds(10), std::chrono::seconds(1));
  std::unique_lock<std::mutex> lock(reactors_mu_);
  while (!stopping_) {
    reactors_cv_.wait_for(lock, period, [&] { return stopping_; });
    if (stopping_) break;
    const auto now = Clock::now();
    for (FetchReactor* r : live_) r->ExpireIfIdle(now, options_.idle_stream_timeout);
  }
}

bool ExpertStoreService::AddPeerStream(const std::string& peer) {
  std::lock_guard<std::mutex> lock(peers_mu_);
  size_t& n = peer_streams_[peer];
  if (n >= options_.max_streams_per_client) {
    if (n == 0) peer_streams_.erase(peer);
    return false;
  }
  ++n;
  return true;
}

void ExpertStoreService::RemovePeerStream(const std::string& peer) {
  std::lock_guard<std::mutex> lock(peers_mu_);
  auto it = peer_streams_.find(peer);
  if (it != peer_streams_.end() && --it->second == 0) peer_streams_.erase(it);
}

grpc::ServerBidiReactor<v1::FetchRequest, v1::FetchResponse>* ExpertStoreService::Fetch(
    grpc::CallbackServerContext* ctx) {
  return new FetchReactor(this, ctx);
}

grpc::ServerUnaryReactor* ExpertStoreService::ListModels(grpc::CallbackServerContext* ctx,
                                                         const v1::ListModelsRequest*,
                                                         v1::ListModelsResponse* resp) {
  for (const auto& m : store_->models()) {
    auto* h = resp->add_models();
    h->set_name(m->name());
    h->set_n_layers(static_cast<uint32_t>(m->n_layers()));
    h->set_n_experts(static_cast<uint32_t>(m->n_experts()));
    h->set_total_expert_bytes(m->total_expert_bytes());
    h->set_full_copy(m->full_copy());
    h->set_serves_parts(true);
    if (!m->full_copy()) {
      const size_t n = static_cast<size_t>(m->n_layers()) * static_cast<size_t>(m->n_experts());
      std::string held((n + 7) / 8, '\0');
      for (int32_t l = 0; l < m->n_layers(); ++l) {
        for (int32_t e = 0; e < m->n_experts(); ++e) {
          if (m->Find({l, e}) == nullptr) continue;
          const size_t bit =
              static_cast<size_t>(l) * static_cast<size_t>(m->n_experts()) + static_cast<size_t>(e);
          held[bit / 8] = static_cast<char>(held[bit / 8] | (1 << (bit % 8)));
        }
      }
      h->set_held(held);
    }
  }
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace colibri::store
