#include "store_service.h"

#include <chrono>
#include <deque>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "colibri/core/checksum.h"
#include "colibri/core/status.h"
#include "spdlog/spdlog.h"

namespace colibri::store {

absl::Status ModelCatalog::AddModelDir(const std::string& dir) {
  ASSIGN_OR_RETURN(auto container, model::Container::Open(dir));
  ASSIGN_OR_RETURN(auto source, expert_source::DiskSource::Open(container.get()));
  const std::string name = container->manifest().name;
  if (models_.count(name)) {
    return absl::AlreadyExistsError(absl::StrCat("two model directories are named '", name, "'"));
  }
  models_[name] = Entry{std::move(container), std::move(source)};
  return absl::OkStatus();
}

const ModelCatalog::Entry* ModelCatalog::Find(const std::string& name) const {
  auto it = models_.find(name);
  return it == models_.end() ? nullptr : &it->second;
}

class ExpertStoreService::FetchReactor final : public grpc::ServerBidiReactor<v1::FetchRequest, v1::FetchResponse> {
 public:
  explicit FetchReactor(ExpertStoreService* svc) : svc_(svc) {
    svc_->metrics_->open_streams->Increment();
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ok) {
      reads_done_ = true;
      MaybeFinishLocked();
      return;
    }
    if (request_.has_block()) {
      Enqueue(request_.block());
    } else if (request_.has_cancel()) {
      CancelQueued(request_.cancel().request_id());
    }
    ScheduleLocked();
    StartRead(&request_);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    buffered_bytes_ -= out_.front().chunk().data().size();
    out_.pop_front();
    if (!ok) broken_ = true;
    WriteNextLocked();
    ScheduleLocked();
    MaybeFinishLocked();
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
      svc_->metrics_->queued_requests->Decrement(static_cast<double>(demand_.size() + prefetch_.size()));
      demand_.clear();
      prefetch_.clear();
      last = tasks_ == 0;
    }
    svc_->metrics_->open_streams->Decrement();
    if (last) delete this;
  }

 private:
  struct Item {
    uint64_t request_id;
    std::string model;
    expert_source::ExpertId id;
    bool demand;
  };

  void Enqueue(const v1::BlockRequest& b) {
    if (demand_.size() + prefetch_.size() >= svc_->options_.max_queued) {
      svc_->metrics_->rejected_requests->Increment();
      PushError(b.request_id(), absl::ResourceExhaustedError(absl::StrCat(
                                    "expert store: more than ", svc_->options_.max_queued,
                                    " requests queued on this stream")));
      return;
    }
    Item item{b.request_id(), b.key().model(),
              expert_source::ExpertId{static_cast<int32_t>(b.key().layer()), static_cast<int32_t>(b.key().expert())},
              b.priority() != v1::PRIORITY_PREFETCH};
    (item.demand ? demand_ : prefetch_).push_back(std::move(item));
    svc_->metrics_->queued_requests->Increment();
  }

  void CancelQueued(uint64_t request_id) {
    for (auto* q : {&prefetch_, &demand_}) {
      for (auto it = q->begin(); it != q->end(); ++it) {
        if (it->request_id == request_id) {
          q->erase(it);
          svc_->metrics_->queued_requests->Decrement();
          svc_->metrics_->cancellations->Increment();
          return;
        }
      }
    }
  }

  void PushError(uint64_t request_id, const absl::Status& status) {
    v1::FetchResponse resp;
    resp.set_request_id(request_id);
    resp.mutable_error()->set_code(static_cast<int>(status.code()));
    resp.mutable_error()->set_message(std::string(status.message()));
    out_.push_back(std::move(resp));
    WriteNextLocked();
  }

  // Starts the next read when none is running and the outgoing buffer has room.
  void ScheduleLocked() {
    if (busy_ || broken_ || done_ || buffered_bytes_ > svc_->options_.max_buffered_bytes) return;
    std::deque<Item>* q = !demand_.empty() ? &demand_ : !prefetch_.empty() ? &prefetch_ : nullptr;
    if (q == nullptr) return;
    Item item = std::move(q->front());
    q->pop_front();
    svc_->metrics_->queued_requests->Decrement();
    busy_ = true;
    tasks_++;
    svc_->io_pool_.Submit([this, item = std::move(item)] { Work(item); });
  }

  void Work(const Item& item) {
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<expert_source::Lease> lease = absl::NotFoundError(
        absl::StrCat("expert store does not hold model '", item.model, "'"));
    if (const auto* entry = svc_->catalog_->Find(item.model)) lease = entry->source->Fetch(item.id, {});
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto& m = *svc_->metrics_;
    (item.demand ? m.read_seconds_demand : m.read_seconds_prefetch)->Observe(secs);
    bool last;
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
      tasks_--;
      if (!done_ && !broken_) {
        if (!lease.ok()) {
          (lease.status().code() == absl::StatusCode::kDataLoss ? m.checksum_failures : m.read_errors)->Increment();
          PushError(item.request_id, lease.status());
        } else {
          PushChunks(item, **lease);
        }
        ScheduleLocked();
        MaybeFinishLocked();
      }
      last = done_ && tasks_ == 0;
    }
    if (last) delete this;
  }

  void PushChunks(const Item& item, const expert_source::Block& block) {
    const uint64_t checksum = Checksum64(block.data(), block.size);
    for (uint64_t off = 0; off < block.size || (off == 0 && block.size == 0);) {
      const uint64_t n = std::min<uint64_t>(svc_->options_.chunk_bytes, block.size - off);
      v1::FetchResponse resp;
      resp.set_request_id(item.request_id);
      auto* c = resp.mutable_chunk();
      c->set_offset(off);
      c->set_data(block.data() + off, n);
      c->set_chunk_checksum(Checksum64(block.data() + off, n));
      c->set_block_size(block.size);
      c->set_block_checksum(checksum);
      off += n;
      c->set_last(off >= block.size);
      buffered_bytes_ += n;
      out_.push_back(std::move(resp));
      if (n == 0) break;
    }
    (item.demand ? svc_->metrics_->blocks_served_demand : svc_->metrics_->blocks_served_prefetch)->Increment();
    svc_->metrics_->bytes_served->Increment(static_cast<double>(block.size));
    WriteNextLocked();
  }

  void WriteNextLocked() {
    if (writing_ || out_.empty() || finished_ || broken_) return;
    writing_ = true;
    StartWrite(&out_.front());
  }

  void MaybeFinishLocked() {
    if (finished_ || busy_ || writing_) return;
    if (broken_) {
      finished_ = true;
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "stream cancelled"));
      return;
    }
    if (reads_done_ && demand_.empty() && prefetch_.empty() && out_.empty()) {
      finished_ = true;
      Finish(grpc::Status::OK);
    }
  }

  ExpertStoreService* svc_;
  std::mutex mu_;
  v1::FetchRequest request_;
  std::deque<Item> demand_, prefetch_;
  std::deque<v1::FetchResponse> out_;  // front is being written when writing_
  size_t buffered_bytes_ = 0;
  int tasks_ = 0;
  bool busy_ = false, writing_ = false, reads_done_ = false, broken_ = false, finished_ = false, done_ = false;
};

ExpertStoreService::ExpertStoreService(const ModelCatalog* catalog, StoreOptions options, StoreMetrics* metrics)
    : catalog_(catalog), options_(options), metrics_(metrics), io_pool_(options.io_threads + 1) {}

ExpertStoreService::~ExpertStoreService() = default;

grpc::ServerBidiReactor<v1::FetchRequest, v1::FetchResponse>* ExpertStoreService::Fetch(
    grpc::CallbackServerContext*) {
  return new FetchReactor(this);
}

grpc::ServerUnaryReactor* ExpertStoreService::ListModels(grpc::CallbackServerContext* ctx,
                                                         const v1::ListModelsRequest*, v1::ListModelsResponse* resp) {
  for (const auto& [name, entry] : catalog_->models()) {
    const auto& m = entry.container->manifest();
    auto* h = resp->add_models();
    h->set_name(name);
    h->set_n_layers(static_cast<uint32_t>(m.config.n_layers));
    h->set_n_experts(static_cast<uint32_t>(m.config.n_experts));
    h->set_total_expert_bytes(m.TotalExpertBytes());
    h->set_full_copy(true);
  }
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace colibri::store
