#include "colibri/rpc/multi_store_source.h"

#include <deque>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "colibri/core/status.h"
#include "colibri/expert_source/expert_label.h"
#include "colibri/rpc/arrivals.h"
#include "spdlog/spdlog.h"

namespace colibri::rpc {

using expert_source::ExpertId;
using expert_source::Lease;
using expert_source::Priority;
using Clock = std::chrono::steady_clock;

namespace {
// How long a measured store rate is trusted.
constexpr int64_t kRateMemoryNs = 3'000'000'000;
}  // namespace

// One fetch across stores: which stores it tried, where it runs now, and whom to tell.
class MultiStoreSource::Request {
 public:
  ExpertId id;
  Priority priority = Priority::kDemand;
  Clock::time_point deadline;
  Done done;
  std::mutex mu;
  std::vector<Store*> tried;
  Store* current = nullptr;
  uint64_t handle = 0;
  bool finished = false;
  bool abandoned = false;
  absl::Status last_error;

  bool Tried(const Store* s) const {
    for (const auto& t : tried) {
      if (t == s) return true;
    }
    return false;
  }
};

MultiStoreSource::MultiStoreSource(const MultiStoreOptions& options,
                                   const model::Manifest* manifest)
    : options_(options), manifest_(manifest) {}

absl::StatusOr<std::unique_ptr<MultiStoreSource::Store>> MultiStoreSource::MakeStore(
    const std::string& target) {
  RemoteStoreOptions ro;
  ro.target = target;
  ro.model = options_.model;
  ro.fetch_timeout = options_.fetch_timeout;
  ro.client_name = options_.client_name;
  ro.shm_bytes = options_.shm_bytes;
  ro.transport = options_.transport;
  auto s = std::make_unique<Store>();
  ASSIGN_OR_RETURN(s->source, RemoteStoreSource::Create(ro, manifest_));
  // A broken stream marks the store down at once, even with nothing in flight on it.
  s->source->OnStreamBroken(
      [this, store = s.get()](const absl::Status& why) { MarkDown(*store, why); });
  return s;
}

absl::StatusOr<std::unique_ptr<MultiStoreSource>> MultiStoreSource::Connect(
    const MultiStoreOptions& options, const model::Manifest* manifest) {
  if (options.targets.empty()) return absl::InvalidArgumentError("no expert store given");
  auto src = std::unique_ptr<MultiStoreSource>(new MultiStoreSource(options, manifest));
  std::vector<std::string> down;
  absl::Status last;
  for (const auto& t : options.targets) {
    ASSIGN_OR_RETURN(auto s, src->MakeStore(t));
    absl::Status st = s->source->Probe(std::chrono::seconds(10));
    if (st.ok()) {
      s->up = true;
    } else {
      // A store without the model (or another version of it) is a configuration error.
      if (st.code() == absl::StatusCode::kNotFound ||
          st.code() == absl::StatusCode::kFailedPrecondition)
        return st;
      down.push_back(t);
      last = st;
    }
    src->stores_.push_back(std::move(s));
  }
  if (down.size() == options.targets.size()) {
    return options.targets.size() == 1 ? last
                                       : absl::UnavailableError(absl::StrCat(
                                             "no expert store is reachable (",
                                             absl::StrJoin(down, ", "), "): ", last.message()));
  }
  for (const auto& t : down)
    spdlog::warn("expert store at {} is not reachable yet; it joins when it comes up", t);
  // The stores that are up must cover the model between them.
  const auto& c = manifest->config;
  for (int32_t l = 0; l < c.n_layers; ++l) {
    for (int32_t e = 0; c.IsMoeLayer(l) && e < c.n_experts; ++e) {
      bool held = false;
      for (const auto& s : src->stores_) held |= s->up && s->source->Holds({l, e});
      if (!held) {
        return absl::FailedPreconditionError(absl::StrCat("no reachable expert store holds ",
                                                          ExpertLabel(l, e), " of model '",
                                                          options.model, "'"));
      }
    }
  }
  src->prober_ = std::thread([s = src.get()] { s->ProbeLoop(); });
  return src;
}

MultiStoreSource::~MultiStoreSource() {
  std::unique_lock<std::mutex> lock(mu_);
  stopping_ = true;
  probe_cv_.notify_all();
  lock.unlock();
  if (prober_.joinable()) prober_.join();
  lock.lock();
  probe_cv_.wait(lock, [&] { return attempts_running_ == 0; });
  std::vector<std::unique_ptr<Store>> stores;
  stores.swap(stores_);
  lock.unlock();
  // Each store fails what it still has pending; Attempt sees stopping_ and retries nothing.
  stores.clear();
}

absl::Status MultiStoreSource::AddStore(const std::string& target) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& s : stores_) {
      if (s->source->target() == target) {
        return absl::AlreadyExistsError(
            absl::StrCat("expert store ", target, " is already a store of this node"));
      }
    }
  }
  ASSIGN_OR_RETURN(auto s, MakeStore(target));
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& other : stores_) {  // added by another caller meanwhile
    if (other->source->target() == target) {
      return absl::AlreadyExistsError(
          absl::StrCat("expert store ", target, " is already a store of this node"));
    }
  }
  stores_.push_back(std::move(s));
  probe_cv_.notify_all();
  return absl::OkStatus();
}

std::vector<MultiStoreSource::Store*> MultiStoreSource::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Store*> out;
  for (const auto& s : stores_) out.push_back(s.get());
  return out;
}

std::vector<StoreState> MultiStoreSource::Stores() const {
  std::vector<StoreState> out;
  for (const auto& s : Snapshot()) {
    out.push_back(
        StoreState{s->source->target(), s->up.load(), s->source->full_copy(), s->source->Stats()});
  }
  return out;
}

uint64_t MultiStoreSource::BlockSize(ExpertId id) const {
  if (!manifest_->HasExpert(id.layer, id.expert)) return 0;
  return manifest_->Expert(id.layer, id.expert).padded_size;
}

void MultiStoreSource::MarkDown(Store& store, const absl::Status& why) {
  if (store.up.exchange(false)) {
    spdlog::warn("expert store at {} is down ({}); reads go to the other holders",
                 store.source->target(), std::string(why.message()));
  }
  std::lock_guard<std::mutex> lock(mu_);
  probe_cv_.notify_all();
}

void MultiStoreSource::ProbeLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    probe_cv_.wait_for(lock, options_.probe_interval);
    if (stopping_) return;
    std::vector<Store*> stores;
    for (const auto& s : stores_) stores.push_back(s.get());
    lock.unlock();
    for (Store* s : stores) {
      if (s->up.load()) continue;
      if (s->source->Probe(std::chrono::milliseconds(1000)).ok()) {
        s->up = true;
        spdlog::info("expert store at {} is up ({}); it takes reads now", s->source->target(),
                     s->source->full_copy() ? "full copy" : "partial copy");
      }
    }
    lock.lock();
  }
}

void MultiStoreSource::Attempt(const std::shared_ptr<Request>& req) {
  bool stopping;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping = stopping_;
    if (!stopping) attempts_running_++;
  }
  if (stopping) {
    {
      std::lock_guard<std::mutex> lock(req->mu);
      req->finished = true;
    }
    req->done(absl::CancelledError("expert store source shutting down"));
    return;
  }
  AttemptOnce(req);
  std::lock_guard<std::mutex> lock(mu_);
  attempts_running_--;
  probe_cv_.notify_all();
}

MultiStoreSource::Store* MultiStoreSource::Choose(const Request& req,
                                                  const std::vector<Store*>& stores,
                                                  const std::map<const Store*, uint64_t>& planned) {
  const uint64_t size = manifest_->Expert(req.id.layer, req.id.expert).size;
  // The holder with the least outstanding work (bytes asked for and not delivered, plus what
  // this batch is about to send there) for its measured rate; stores that are down come last (a
  // probe may not have noticed they are back).
  Store* best = nullptr;
  bool best_up = false;
  double best_cost = std::numeric_limits<double>::max();
  const size_t n = stores.size();
  const size_t start = n == 0 ? 0 : rotation_++ % n;  // ties rotate
  const int64_t now_ns = Clock::now().time_since_epoch().count();
  // Unknown (or stale) rates count as the best known one: new stores get their share.
  double best_rate = 0;
  for (Store* s : stores) {
    if (now_ns - s->rate_at_ns.load() < kRateMemoryNs)
      best_rate = std::max(best_rate, s->rate.load());
  }
  if (best_rate <= 0) best_rate = 1e9;
  for (size_t k = 0; k < n; ++k) {
    Store* s = stores[(start + k) % n];
    if (req.Tried(s) || !s->source->Holds(req.id)) continue;
    const bool up = s->up.load();
    const double rate = now_ns - s->rate_at_ns.load() < kRateMemoryNs ? s->rate.load() : best_rate;
    auto extra = planned.find(s);
    const double queued = static_cast<double>(s->source->Stats().outstanding_bytes + size +
                                              (extra == planned.end() ? 0 : extra->second));
    const double cost = queued / std::max(rate, 1.0);
    if (!best || (up && !best_up) || (up == best_up && cost < best_cost)) {
      best = s;
      best_up = up;
      best_cost = cost;
    }
  }
  return best;
}

RemoteStoreSource::Callback MultiStoreSource::OnAnswer(const std::shared_ptr<Request>& req,
                                                       Store* store) {
  const uint64_t size = manifest_->Expert(req->id.layer, req->id.expert).size;
  std::weak_ptr<Request> weak = req;
  // The callback holds the store by pointer: stores live as long as this source, and a
  // callback owning one could end up destroying it on its own reader thread.
  return [this, weak, store, size, t0 = Clock::now()](absl::StatusOr<Lease> r) {
    if (r.ok()) {
      // Delivery rate of this fetch, queueing included: a busy store looks slower.
      const auto now = Clock::now();
      const double secs = std::max(1e-6, std::chrono::duration<double>(now - t0).count());
      const double sample = static_cast<double>(size) / secs;
      const double old = store->rate.load();
      const bool fresh = now.time_since_epoch().count() - store->rate_at_ns.load() < kRateMemoryNs;
      store->rate = fresh && old > 0 ? 0.7 * old + 0.3 * sample : sample;
      store->rate_at_ns = now.time_since_epoch().count();
    }
    auto req = weak.lock();
    if (!req) return;
    if (r.ok()) {
      {
        std::lock_guard<std::mutex> lock(req->mu);
        req->finished = true;
      }
      req->done(std::move(r));
      return;
    }
    const auto code = r.status().code();
    if (code == absl::StatusCode::kUnavailable) MarkDown(*store, r.status());
    bool retry;
    {
      std::lock_guard<std::mutex> lock(req->mu);
      retry = !req->abandoned && Clock::now() < req->deadline &&
              (code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDataLoss ||
               code == absl::StatusCode::kNotFound);
      req->last_error = r.status();
      if (!retry) req->finished = true;
    }
    if (retry) {
      Attempt(req);
    } else {
      req->done(std::move(r));
    }
  };
}

bool MultiStoreSource::Assign(const std::shared_ptr<Request>& req, Store* best) {
  {
    std::lock_guard<std::mutex> lock(req->mu);
    if (req->abandoned) return false;
    if (best) {
      req->tried.push_back(best);
      req->current = best;
      if (req->tried.size() > 1) failovers_++;
      return true;
    }
    req->finished = true;
  }
  FailUnheld(req);
  return false;
}

void MultiStoreSource::FailUnheld(const std::shared_ptr<Request>& req) {
  absl::Status err =
      req->last_error.ok()
          ? absl::UnavailableError(absl::StrCat("no expert store holds ", ExpertLabel(req->id)))
          : req->last_error;
  req->done(err);
}

void MultiStoreSource::AttemptOnce(const std::shared_ptr<Request>& req) {
  for (;;) {
    Store* best;
    {
      std::lock_guard<std::mutex> lock(req->mu);
      if (req->abandoned) return;
      best = Choose(*req, Snapshot(), {});
    }
    if (!Assign(req, best)) return;
    auto handle =
        best->source->StartFetch(req->id, req->priority, req->deadline, OnAnswer(req, best));
    if (handle.ok()) {
      std::lock_guard<std::mutex> lock(req->mu);
      req->handle = *handle;
      return;
    }
    // Could not even start there (stream cannot open): try the next holder.
    if (handle.status().code() == absl::StatusCode::kUnavailable) MarkDown(*best, handle.status());
    std::lock_guard<std::mutex> lock(req->mu);
    req->last_error = handle.status();
  }
}

void MultiStoreSource::StartBatch(const std::vector<std::shared_ptr<Request>>& reqs,
                                  Priority priority, Clock::time_point deadline) {
  bool stopping;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping = stopping_;
    if (!stopping) attempts_running_++;
  }
  if (stopping) {
    for (const auto& req : reqs) Attempt(req);  // each fails Cancelled
    return;
  }
  // Each request to the holder that should deliver it first, then one batch per store.
  const std::vector<Store*> stores = Snapshot();
  std::map<const Store*, uint64_t> planned;
  std::map<Store*, std::vector<std::shared_ptr<Request>>> by_store;
  for (const auto& req : reqs) {
    Store* best;
    {
      std::lock_guard<std::mutex> lock(req->mu);
      best = Choose(*req, stores, planned);
    }
    if (!Assign(req, best)) continue;
    planned[best] += manifest_->Expert(req->id.layer, req->id.expert).size;
    by_store[best].push_back(req);
  }
  for (auto& [store, batch] : by_store) {
    std::vector<ExpertId> ids;
    std::vector<RemoteStoreSource::Callback> dones;
    for (const auto& req : batch) {
      ids.push_back(req->id);
      dones.push_back(OnAnswer(req, store));
    }
    auto handles = store->source->StartFetches(ids, priority, deadline, std::move(dones));
    if (handles.ok()) {
      for (size_t k = 0; k < batch.size(); ++k) {
        std::lock_guard<std::mutex> lock(batch[k]->mu);
        batch[k]->handle = (*handles)[k];
      }
      continue;
    }
    // Could not even start there (stream cannot open): each tries the next holder.
    if (handles.status().code() == absl::StatusCode::kUnavailable) {
      MarkDown(*store, handles.status());
    }
    for (const auto& req : batch) {
      {
        std::lock_guard<std::mutex> lock(req->mu);
        req->last_error = handles.status();
      }
      Attempt(req);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  attempts_running_--;
  probe_cv_.notify_all();
}

absl::Status MultiStoreSource::RunMany(std::span<const ExpertId> ids, Priority priority,
                                       const std::function<void(size_t, Lease)>& on_ready) {
  Arrivals arrivals;
  const auto deadline = Clock::now() + options_.fetch_timeout;
  std::vector<std::shared_ptr<Request>> reqs;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!manifest_->HasExpert(ids[i].layer, ids[i].expert)) {
      return absl::NotFoundError(
          absl::StrCat(ExpertLabel(ids[i]), " is not in model '", options_.model, "'"));
    }
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    auto req = std::make_shared<Request>();
    req->id = ids[i];
    req->priority = priority;
    req->deadline = deadline;
    req->done = arrivals.Slot(i);
    reqs.push_back(req);
  }
  StartBatch(reqs, priority, deadline);
  const absl::Status first_error = arrivals.Drain(
      ids.size(), deadline,
      absl::StrCat("expert fetch timed out after ", options_.fetch_timeout.count(), " ms"),
      on_ready, /*skip_cancelled=*/priority == Priority::kPrefetch);
  if (!first_error.ok()) {
    for (const auto& req : reqs) {
      Store* store = nullptr;
      uint64_t handle = 0;
      {
        std::lock_guard<std::mutex> l(req->mu);
        if (req->finished) continue;
        req->abandoned = true;
        store = req->current;
        handle = req->handle;
      }
      if (store && handle != 0) store->source->Abandon(handle);
    }
  }
  return first_error;
}

void MultiStoreSource::Promote(std::span<const ExpertId> ids) {
  // Only the store whose requests these are sends anything.
  for (Store* s : Snapshot()) s->source->Promote(ids);
}

void MultiStoreSource::Cancel(std::span<const ExpertId> ids) {
  for (Store* s : Snapshot()) s->source->Cancel(ids);
}

absl::StatusOr<Lease> MultiStoreSource::Fetch(ExpertId id, Priority priority) {
  Lease out;
  RETURN_IF_ERROR(RunMany(std::span<const ExpertId>(&id, 1), priority,
                          [&](size_t, Lease l) { out = std::move(l); }));
  return out;
}

absl::Status MultiStoreSource::FetchMany(std::span<const ExpertId> ids,
                                         const std::function<void(size_t, Lease)>& on_ready,
                                         Priority priority) {
  return RunMany(ids, priority, on_ready);
}

}  // namespace colibri::rpc
