#include "store_service.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <limits>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "colibri/core/checksum.h"
#include "colibri/rpc/shm_region.h"

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

class ExpertStoreService::FetchReactor final
    : public grpc::ServerBidiReactor<v1::FetchRequest, v1::FetchResponse> {
 public:
  FetchReactor(ExpertStoreService* svc, grpc::CallbackServerContext* ctx)
      : svc_(svc), ctx_(ctx), peer_(PeerHost(ctx)), last_request_(Clock::now()) {
    unix_peer_ = ctx->peer().rfind("unix:", 0) == 0;
    client_bytes_ = svc_->metrics_->ClientBytes(ClientName(ctx));
    std::lock_guard<std::mutex> reactors(
        svc_->reactors_mu_);  // the idle thread waits for the start
    svc_->reactors_++;
    svc_->live_.insert(this);
    std::lock_guard<std::mutex> lock(mu_);
    if (svc_->open_streams_.fetch_add(1) >= svc_->options_.max_streams) {
      svc_->open_streams_--;
      RejectLocked(absl::StrCat("expert store: more than ", svc_->options_.max_streams,
                                " Fetch streams are open"));
      return;
    }
    if (!svc_->AddPeerStream(peer_)) {
      svc_->open_streams_--;
      RejectLocked(absl::StrCat("expert store: client ", peer_, " already has ",
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

  // Ends the stream when no request came for `timeout` and no read is in progress. Called by
  // the service's idle thread (under reactors_mu_, so the reactor is alive).
  void ExpireIfIdle(Clock::time_point now, std::chrono::milliseconds timeout) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_ || done_ || broken_ || !in_flight_.empty() || now - last_request_ < timeout)
      return;
    svc_->metrics_->idle_streams_closed->Increment();
    if (writing_ || !demand_out_.empty() || !prefetch_out_.empty()) {
      ctx_->TryCancel();  // answers wait for a client that stopped reading: OnCancel finishes
      return;
    }
    svc_->metrics_->queued_requests->Decrement(
        static_cast<double>(demand_.size() + prefetch_.size()));
    demand_.clear();
    prefetch_.clear();
    finished_ = true;
    Finish(grpc::Status::OK);
  }

  void OnReadDone(bool ok) override {
    std::vector<Request> starts;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!ok) {
        reads_done_ = true;
        MaybeFinishLocked();
        return;
      }
      last_request_ = Clock::now();
      if (request_.has_block()) {
        EnqueueLocked(request_.block());
      } else if (request_.has_cancel()) {
        CancelLocked(request_.cancel().request_id());
      } else if (request_.has_shm_attach()) {
        AttachLocked(request_.shm_attach());
      }
      ScheduleLocked(&starts);
      // Under the lock: a read must never be started after Finish (OnCancel may finish the
      // stream from another thread). gRPC never runs a reaction inside Start*.
      if (!finished_) StartRead(&request_);
    }
    StartReads(starts);
  }

  void OnWriteDone(bool ok) override {
    std::vector<Request> starts;
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      if (!ok) broken_ = true;
      WriteNextLocked();
      ScheduleLocked(&starts);
      MaybeFinishLocked();
    }
    StartReads(starts);
  }

  void OnCancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    broken_ = true;
    MaybeFinishLocked();
  }

  void OnDone() override {
    bool last;
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      svc_->metrics_->queued_requests->Decrement(
          static_cast<double>(demand_.size() + prefetch_.size()));
      demand_.clear();
      prefetch_.clear();
      last = tasks_ == 0;
    }
    if (counted_) {
      svc_->open_streams_--;
      svc_->RemovePeerStream(peer_);
      svc_->metrics_->open_streams->Decrement();
    }
    if (last) delete this;
  }

 private:
  void RejectLocked(const std::string& why) {
    svc_->metrics_->rejected_streams->Increment();
    finished_ = true;
    Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, why));
  }

  struct Request {
    uint64_t id = 0;
    const StoredModel* model = nullptr;
    const BlockRecord* block = nullptr;
    bool demand = true;
    Clock::time_point deadline = Clock::time_point::max();
    uint32_t timeout_ms = 0;
    uint8_t* shm_dst = nullptr;  // set: read into the client's shared memory
    uint64_t shm_offset = 0;
    Clock::time_point started;
  };
  // An answer waiting for the network: a read block cut into chunks as writes complete, or a
  // ready message (error, ShmBlock, ShmAttached).
  struct Out {
    uint64_t id = 0;
    SharedBlock block;
    const BlockRecord* record = nullptr;
    uint64_t next = 0;
    v1::FetchResponse message;
  };

  void EnqueueLocked(const v1::BlockRequest& b) {
    auto& m = *svc_->metrics_;
    if (demand_.size() + prefetch_.size() >= svc_->options_.max_queued) {
      m.rejected_requests->Increment();
      PushErrorLocked(b.request_id(), absl::ResourceExhaustedError(absl::StrCat(
                                          "expert store: more than ", svc_->options_.max_queued,
                                          " requests queued on this stream")));
      return;
    }
    Request r;
    r.id = b.request_id();
    auto rec =
        svc_->store_->FindBlock(b.key().model(), b.key().layer(), b.key().expert(), &r.model);
    if (!rec.ok()) {
      m.read_errors->Increment();
      PushErrorLocked(r.id, rec.status());
      return;
    }
    r.block = *rec;
    r.demand = b.priority() != v1::PRIORITY_PREFETCH;
    r.timeout_ms = b.timeout_ms();
    if (b.timeout_ms() > 0) r.deadline = Clock::now() + std::chrono::milliseconds(b.timeout_ms());
    if (b.has_shm_offset()) {
      if (!shm_) {
        PushErrorLocked(r.id, absl::FailedPreconditionError(
                                  "no shared-memory region is attached to this stream"));
        return;
      }
      const uint64_t off = b.shm_offset();
      if (off % 4096 != 0 || off > shm_->size() || r.block->padded_size > shm_->size() - off) {
        PushErrorLocked(r.id, absl::InvalidArgumentError(absl::StrCat(
                                  "shared-memory offset ", off, " (+", r.block->padded_size,
                                  " bytes) is not inside the region")));
        return;
      }
      r.shm_dst = shm_->data() + off;
      r.shm_offset = off;
    }
    (r.demand ? demand_ : prefetch_).push_back(r);
    m.queued_requests->Increment();
  }

  void CancelLocked(uint64_t id) {
    auto& m = *svc_->metrics_;
    for (auto* q : {&prefetch_, &demand_}) {
      for (auto it = q->begin(); it != q->end(); ++it) {
        if (it->id != id) continue;
        q->erase(it);
        m.queued_requests->Decrement();
        m.cancellations->Increment();
        PushErrorLocked(id, absl::CancelledError("cancelled by the client"));
        return;
      }
    }
    if (auto it = in_flight_.find(id); it != in_flight_.end()) {
      if (!it->second) m.cancellations->Increment();
      it->second = true;  // answered when the read ends
      return;
    }
    for (auto* q : {&prefetch_out_, &demand_out_}) {
      for (auto it = q->begin(); it != q->end(); ++it) {
        if (it->id != id || !it->block) continue;
        buffered_bytes_ -= it->block->size - it->next;
        q->erase(it);
        m.cancellations->Increment();
        PushErrorLocked(id, absl::CancelledError("cancelled by the client"));
        return;
      }
    }
  }

  void AttachLocked(const v1::ShmAttach& a) {
    v1::FetchResponse resp;
    auto* ans = resp.mutable_shm_attached();
    if (shm_) {
      ans->set_message("a shared-memory region is already attached to this stream");
    } else if (!svc_->options_.allow_shm) {
      ans->set_message("shared memory is disabled on this store (--no-shm)");
    } else if (!unix_peer_) {
      ans->set_message("shared memory needs a unix-socket connection");
    } else {
      auto region = rpc::ShmRegion::Attach(a.name(), a.size());
      if (region.ok()) {
        shm_ = std::move(*region);
        ans->set_ok(true);
      } else {
        ans->set_message(std::string(region.status().message()));
      }
    }
    Out o;
    o.message = std::move(resp);
    demand_out_.push_back(std::move(o));
    WriteNextLocked();
  }

  void PushErrorLocked(uint64_t id, const absl::Status& status) {
    Out o;
    o.id = id;
    o.message.set_request_id(id);
    o.message.mutable_error()->set_code(static_cast<int>(status.code()));
    o.message.mutable_error()->set_message(std::string(status.message()));
    demand_out_.push_back(std::move(o));
    WriteNextLocked();
  }

  // Picks requests to read (demand first) while the stream has read slots and buffer room.
  // The reads start after the caller releases the lock (StartReads).
  void ScheduleLocked(std::vector<Request>* starts) {
    if (broken_ || done_ || finished_) return;
    auto& m = *svc_->metrics_;
    while (in_flight_.size() < svc_->options_.max_reads_in_flight) {
      std::deque<Request>* q = !demand_.empty()     ? &demand_
                               : !prefetch_.empty() ? &prefetch_
                                                    : nullptr;
      if (q == nullptr) break;
      // Bytes read for the network count against the buffer; shared-memory reads land in the
      // client's memory and only take a read slot.
      if (q->front().shm_dst == nullptr &&
          chunk_bytes_in_flight_ + buffered_bytes_ >= svc_->options_.max_buffered_bytes) {
        break;
      }
      Request r = q->front();
      q->pop_front();
      m.queued_requests->Decrement();
      r.started = Clock::now();
      if (r.started > r.deadline) {
        m.deadline_exceeded->Increment();
        PushErrorLocked(r.id,
                        absl::DeadlineExceededError(absl::StrCat(
                            "expert (layer ", r.block->layer, ", id ", r.block->expert,
                            "): still queued after the request's ", r.timeout_ms, " ms timeout")));
        continue;
      }
      if (r.shm_dst == nullptr) chunk_bytes_in_flight_ += r.block->size;
      in_flight_[r.id] = false;
      tasks_++;
      m.reads_in_flight->Increment();
      starts->push_back(r);
    }
  }

  void StartReads(const std::vector<Request>& starts) {
    for (const Request& r : starts) {
      const Priority p = r.demand ? Priority::kDemand : Priority::kPrefetch;
      if (r.shm_dst != nullptr) {
        svc_->store_->ReadInto(*r.model, *r.block, r.shm_dst, p, [this, r](absl::Status s) {
          OnReadComplete(r, std::move(s), nullptr);
        });
      } else {
        svc_->store_->ReadShared(*r.model, *r.block, p, [this, r](absl::StatusOr<SharedBlock> b) {
          OnReadComplete(r, b.status(), b.ok() ? std::move(*b) : nullptr);
        });
      }
    }
  }

  void OnReadComplete(const Request& r, absl::Status status, SharedBlock block) {
    auto& m = *svc_->metrics_;
    (r.demand ? m.read_seconds_demand : m.read_seconds_prefetch)
        ->Observe(std::chrono::duration<double>(Clock::now() - r.started).count());
    m.reads_in_flight->Decrement();
    std::vector<Request> starts;
    bool last;
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_--;
      if (r.shm_dst == nullptr) chunk_bytes_in_flight_ -= r.block->size;
      const bool cancelled = in_flight_[r.id];
      in_flight_.erase(r.id);
      if (!done_ && !broken_) {
        if (cancelled) {
          PushErrorLocked(r.id, absl::CancelledError("cancelled by the client"));
        } else if (Clock::now() > r.deadline) {
          m.deadline_exceeded->Increment();
          PushErrorLocked(
              r.id, absl::DeadlineExceededError(absl::StrCat(
                        "expert (layer ", r.block->layer, ", id ", r.block->expert,
                        "): read finished after the request's ", r.timeout_ms, " ms timeout")));
        } else if (!status.ok()) {
          (IsChecksumMismatch(status) ? m.checksum_failures : m.read_errors)->Increment();
          PushErrorLocked(r.id, status);
        } else {
          (r.demand ? m.blocks_served_demand : m.blocks_served_prefetch)->Increment();
          const double bytes = static_cast<double>(r.block->size);
          m.bytes_served->Increment(bytes);
          client_bytes_->Increment(bytes);
          Out o;
          o.id = r.id;
          if (r.shm_dst != nullptr) {
            m.shm_bytes_served->Increment(bytes);
            o.message.set_request_id(r.id);
            auto* d = o.message.mutable_shm_block();
            d->set_offset(r.shm_offset);
            d->set_block_size(r.block->size);
            d->set_block_checksum(r.block->checksum);
            demand_out_.push_back(std::move(o));
          } else {
            o.block = std::move(block);
            o.record = r.block;
            buffered_bytes_ += r.block->size;
            (r.demand ? demand_out_ : prefetch_out_).push_back(std::move(o));
          }
        }
        WriteNextLocked();
        ScheduleLocked(&starts);
        MaybeFinishLocked();
      }
      last = done_ && tasks_ == 0;
    }
    StartReads(starts);
    if (last) delete this;
  }

  // Starts the next write: demand answers first; a block's next chunk is cut here.
  void WriteNextLocked() {
    if (writing_ || finished_ || broken_) return;
    std::deque<Out>* q = !demand_out_.empty()     ? &demand_out_
                         : !prefetch_out_.empty() ? &prefetch_out_
                                                  : nullptr;
    if (q == nullptr) return;
    Out& o = q->front();
    if (o.block) {
      const uint64_t size = o.block->size;
      const uint64_t n = std::min<uint64_t>(svc_->options_.chunk_bytes, size - o.next);
      current_.Clear();
      current_.set_request_id(o.id);
      auto* c = current_.mutable_chunk();
      c->set_offset(o.next);
      c->set_data(o.block->data() + o.next, n);
      c->set_chunk_checksum(Checksum64(o.block->data() + o.next, n));
      c->set_block_size(size);
      c->set_block_checksum(o.record->checksum);
      o.next += n;
      buffered_bytes_ -= n;
      c->set_last(o.next >= size);
      if (o.next >= size) q->pop_front();
    } else {
      current_ = std::move(o.message);
      q->pop_front();
    }
    writing_ = true;
    StartWrite(&current_);
  }

  void MaybeFinishLocked() {
    if (finished_ || writing_) return;
    if (broken_) {
      finished_ = true;
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "stream cancelled"));
      return;
    }
    if (reads_done_ && demand_.empty() && prefetch_.empty() && in_flight_.empty() &&
        demand_out_.empty() && prefetch_out_.empty()) {
      finished_ = true;
      Finish(grpc::Status::OK);
    }
  }

  ExpertStoreService* svc_;
  grpc::CallbackServerContext* ctx_;  // valid until OnDone
  const std::string peer_;            // the quota's key
  Clock::time_point last_request_;    // the last message from the client (mu_)
  prometheus::Counter* client_bytes_ = nullptr;
  bool unix_peer_ = false;
  bool counted_ = false;
  std::mutex mu_;
  v1::FetchRequest request_;
  v1::FetchResponse current_;  // being written while writing_
  std::deque<Request> demand_, prefetch_;
  std::unordered_map<uint64_t, bool> in_flight_;  // request id -> cancelled
  std::deque<Out> demand_out_, prefetch_out_;
  uint64_t buffered_bytes_ = 0;          // read bytes not yet cut into written chunks
  uint64_t chunk_bytes_in_flight_ = 0;   // bytes of reads that will become chunks
  std::unique_ptr<rpc::ShmRegion> shm_;  // outlives every read into it (deleted with the reactor)
  int tasks_ = 0;
  bool writing_ = false, reads_done_ = false, broken_ = false, finished_ = false, done_ = false;
};

ExpertStoreService::ExpertStoreService(BlockStore* store, StoreOptions options,
                                       StoreMetrics* metrics)
    : store_(store), options_(options), metrics_(metrics) {
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
    if (!m->full_copy()) {
      const size_t n = static_cast<size_t>(m->n_layers()) * static_cast<size_t>(m->n_experts());
      std::string held((n + 7) / 8, '\0');
      for (int32_t l = 0; l < m->n_layers(); ++l) {
        for (int32_t e = 0; e < m->n_experts(); ++e) {
          if (m->Find(l, e) == nullptr) continue;
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
