#include "colibri/rpc/multi_store_source.h"

#include <deque>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "colibri/core/buffer_pool.h"
#include "colibri/core/checksum.h"
#include "colibri/core/status.h"
#include "colibri/expert_source/expert_label.h"
#include "colibri/model/container.h"
#include "colibri/rpc/arrivals.h"
#include "colibri/rpc/holder_split.h"
#include "spdlog/spdlog.h"

namespace colibri::rpc {

using expert_source::ExpertId;
using expert_source::Lease;
using expert_source::Priority;
using Clock = std::chrono::steady_clock;

namespace {
// How long a measured store rate is trusted.
constexpr int64_t kRateMemoryNs = 3'000'000'000;

// Errors another holder may not have: the store died or its stream broke, a corrupt copy, a
// block it no longer holds.
bool Retryable(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDataLoss ||
         code == absl::StatusCode::kNotFound;
}
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
  // Read in parts from several stores: the buffer they land in, parts still to come, and
  // where they were sent (for Abandon). `failed`: a part failed or the block did not verify,
  // so the parts' later answers are ignored (the block is being read whole).
  struct Split {
    std::shared_ptr<expert_source::Block> block;
    size_t remaining = 0;
    bool failed = false;
    std::vector<std::pair<Store*, uint64_t>> handles;
  };
  std::unique_ptr<Split> split;

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
  ro.arena = options_.arena;
  ro.verify = options_.verify;
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
  if (!manifest_->HasExpert(id)) return 0;
  return manifest_->Expert(id).padded_size;
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
  const uint64_t size = manifest_->Expert(req.id).size;
  // The holder with the least outstanding work (bytes asked for and not delivered, plus what
  // this batch is about to send there) for its measured rate; stores that are down come last (a
  // probe may not have noticed they are back).
  Store* best = nullptr;
  bool best_up = false;
  double best_cost = std::numeric_limits<double>::max();
  const size_t n = stores.size();
  const size_t start = n == 0 ? 0 : rotation_++ % n;  // ties rotate
  const int64_t now_ns = Clock::now().time_since_epoch().count();
  const double best_rate = BestRate(stores, now_ns);
  for (size_t k = 0; k < n; ++k) {
    Store* s = stores[(start + k) % n];
    if (req.Tried(s) || !s->source->Holds(req.id)) continue;
    const bool up = s->up.load();
    const double rate = RateOf(*s, now_ns, best_rate);
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

double MultiStoreSource::RateOf(const Store& store, int64_t now_ns, double fallback) {
  return now_ns - store.rate_at_ns.load() < kRateMemoryNs ? store.rate.load() : fallback;
}

// Unknown (or stale) rates count as the best known one: new stores get their share.
double MultiStoreSource::BestRate(const std::vector<Store*>& stores, int64_t now_ns) {
  double best = 0;
  for (const Store* s : stores) best = std::max(best, RateOf(*s, now_ns, 0));
  return best > 0 ? best : 1e9;
}

// Delivery rate of one fetch, queueing included: a busy store looks slower.
void MultiStoreSource::Sample(Store& store, uint64_t bytes, Clock::time_point t0) {
  const auto now = Clock::now();
  const double secs = std::max(1e-6, std::chrono::duration<double>(now - t0).count());
  const double sample = static_cast<double>(bytes) / secs;
  const double old = store.rate.load();
  const bool fresh = now.time_since_epoch().count() - store.rate_at_ns.load() < kRateMemoryNs;
  store.rate = fresh && old > 0 ? 0.7 * old + 0.3 * sample : sample;
  store.rate_at_ns = now.time_since_epoch().count();
}

std::optional<std::vector<std::pair<MultiStoreSource::Store*, RemoteStoreSource::Part>>>
MultiStoreSource::PlanParts(const std::shared_ptr<Request>& req, const std::vector<Store*>& stores,
                            const std::map<const Store*, uint64_t>& planned, int64_t now_ns,
                            double best_rate) {
  const model::ExpertBlock& want = manifest_->Expert(req->id);
  if (options_.split_min_bytes == 0 || want.size < 2 * options_.split_min_bytes)
    return std::nullopt;
  std::vector<Store*> holders;
  std::vector<HolderLoad> loads;
  for (Store* s : stores) {
    if (!s->up.load() || !s->source->Holds(req->id) || !s->source->serves_parts()) continue;
    auto extra = planned.find(s);
    holders.push_back(s);
    loads.push_back({static_cast<double>(s->source->Stats().outstanding_bytes +
                                         (extra == planned.end() ? 0 : extra->second)),
                     std::max(RateOf(*s, now_ns, best_rate), 1.0)});
  }
  if (holders.size() < 2) return std::nullopt;
  const std::vector<uint64_t> shares =
      SplitAcrossHolders(loads, want.size, options_.split_min_bytes, model::kExpertBlockAlignment);
  size_t used = 0;
  for (uint64_t s : shares) used += s > 0 ? 1 : 0;
  if (used < 2) return std::nullopt;
  auto block = RemoteStoreSource::NewBlockBuffer(req->id, want, options_.arena);
  if (!block.ok()) return std::nullopt;  // the whole-block path reports it
  std::vector<std::pair<Store*, RemoteStoreSource::Part>> parts;
  uint64_t at = 0;
  for (size_t i = 0; i < holders.size(); ++i) {
    if (shares[i] == 0) continue;
    parts.push_back({holders[i], RemoteStoreSource::Part{at, at + shares[i], *block}});
    at += shares[i];
  }
  std::lock_guard<std::mutex> lock(req->mu);
  req->split = std::make_unique<Request::Split>();
  req->split->block = std::move(*block);
  req->split->remaining = parts.size();
  return parts;
}

RemoteStoreSource::Callback MultiStoreSource::OnPart(const std::shared_ptr<Request>& req,
                                                     Store* store, uint64_t bytes) {
  std::weak_ptr<Request> weak = req;
  return [this, weak, store, bytes, t0 = Clock::now()](absl::StatusOr<Lease> r) {
    if (r.ok()) Sample(*store, bytes, t0);
    auto req = weak.lock();
    if (!req) return;
    if (!r.ok() && r.status().code() == absl::StatusCode::kUnavailable) {
      MarkDown(*store, r.status());
    }
    std::vector<std::pair<Store*, uint64_t>> abandon;
    std::shared_ptr<expert_source::Block> assembled;
    absl::Status error;
    bool retry = false;
    {
      std::lock_guard<std::mutex> lock(req->mu);
      Request::Split* split = req->split.get();
      if (split == nullptr || split->failed || req->finished) return;
      if (r.ok()) {
        if (--split->remaining > 0) return;
        assembled = split->block;
      } else {
        split->failed = true;
        abandon = split->handles;
        req->last_error = r.status();
        if (Retryable(r.status().code())) req->tried.push_back(store);
        retry = !req->abandoned && Clock::now() < req->deadline && Retryable(r.status().code());
        if (!retry) {
          req->finished = true;
          error = r.status();
        }
      }
    }
    if (assembled) {
      const model::ExpertBlock& want = manifest_->Expert(req->id);
      const absl::Status check =
          VerifyReceived(options_.verify, want, assembled->data(), "parts from several stores");
      if (check.ok()) {
        {
          std::lock_guard<std::mutex> lock(req->mu);
          req->finished = true;
        }
        split_blocks_++;
        req->done(Lease(std::move(assembled)));
        return;
      }
      // One of the holders sent wrong bytes: read the block whole (a store verifies it).
      const absl::Status& bad = check;
      spdlog::warn("{}; reading it whole from one store", std::string(bad.message()));
      std::lock_guard<std::mutex> lock(req->mu);
      req->split->failed = true;
      req->last_error = bad;
      retry = !req->abandoned && Clock::now() < req->deadline;
      if (!retry) {
        req->finished = true;
        error = bad;
      }
      failovers_++;
    }
    for (const auto& [s, handle] : abandon) s->source->Abandon(handle);
    if (retry) {
      Attempt(req);
    } else {
      req->done(std::move(error));
    }
  };
}

RemoteStoreSource::Callback MultiStoreSource::OnAnswer(const std::shared_ptr<Request>& req,
                                                       Store* store) {
  const uint64_t size = manifest_->Expert(req->id.layer, req->id.expert).size;
  std::weak_ptr<Request> weak = req;
  // The callback holds the store by pointer: stores live as long as this source, and a
  // callback owning one could end up destroying it on its own reader thread.
  return [this, weak, store, size, t0 = Clock::now()](absl::StatusOr<Lease> r) {
    if (r.ok()) Sample(*store, size, t0);
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
      retry = !req->abandoned && Clock::now() < req->deadline && Retryable(code);
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
      req->handle = 0;  // the old store's id until the new fetch starts
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
  // Each request in parts over its holders when that lands it sooner, else whole to the
  // holder that should deliver it first; then one batch per store.
  struct Send {
    std::shared_ptr<Request> req;
    RemoteStoreSource::Part part;  // `into` unset: the whole block
  };
  const std::vector<Store*> stores = Snapshot();
  const int64_t now_ns = Clock::now().time_since_epoch().count();
  const double best_rate = BestRate(stores, now_ns);
  std::map<const Store*, uint64_t> planned;
  std::map<Store*, std::vector<Send>> by_store;
  for (const auto& req : reqs) {
    if (auto parts = PlanParts(req, stores, planned, now_ns, best_rate)) {
      for (auto& [store, part] : *parts) {
        planned[store] += part.end - part.begin;
        by_store[store].push_back({req, std::move(part)});
      }
      continue;
    }
    Store* best;
    {
      std::lock_guard<std::mutex> lock(req->mu);
      best = Choose(*req, stores, planned);
    }
    if (!Assign(req, best)) continue;
    planned[best] += manifest_->Expert(req->id).size;
    by_store[best].push_back({req, {}});
  }
  for (auto& [store, all] : by_store) {
    // Parts of a block whose split already failed (an earlier store's part) are not sent.
    std::vector<Send> batch;
    for (Send& s : all) {
      std::lock_guard<std::mutex> lock(s.req->mu);
      if (!s.part.into || !s.req->split->failed) batch.push_back(std::move(s));
    }
    if (batch.empty()) continue;
    std::vector<ExpertId> ids;
    std::vector<RemoteStoreSource::Callback> dones;
    std::vector<RemoteStoreSource::Part> parts;  // a whole block's has no `into`
    for (const Send& s : batch) {
      ids.push_back(s.req->id);
      parts.push_back(s.part);
      dones.push_back(s.part.into ? OnPart(s.req, store, s.part.end - s.part.begin)
                                  : OnAnswer(s.req, store));
    }
    auto handles = store->source->StartFetches(ids, priority, deadline, std::move(dones), parts);
    if (handles.ok()) {
      std::vector<uint64_t> late;  // parts of splits that failed while this batch started
      for (size_t k = 0; k < batch.size(); ++k) {
        std::lock_guard<std::mutex> lock(batch[k].req->mu);
        if (!batch[k].part.into) {
          batch[k].req->handle = (*handles)[k];
        } else if (batch[k].req->split->failed) {
          late.push_back((*handles)[k]);
        } else {
          batch[k].req->split->handles.push_back({store, (*handles)[k]});
        }
      }
      for (uint64_t h : late) store->source->Abandon(h);
      continue;
    }
    // Could not even start there (stream cannot open): each tries the next holder (a part:
    // its block is read whole).
    if (handles.status().code() == absl::StatusCode::kUnavailable) {
      MarkDown(*store, handles.status());
    }
    for (const Send& s : batch) {
      if (s.part.into) {
        OnPart(s.req, store, s.part.end - s.part.begin)(handles.status());
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(s.req->mu);
        s.req->last_error = handles.status();
      }
      Attempt(s.req);
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
      std::vector<std::pair<Store*, uint64_t>> handles;
      {
        std::lock_guard<std::mutex> l(req->mu);
        if (req->finished) continue;
        req->abandoned = true;
        if (req->current && req->handle != 0) handles.push_back({req->current, req->handle});
        if (req->split) {
          handles.insert(handles.end(), req->split->handles.begin(), req->split->handles.end());
        }
      }
      for (const auto& [store, handle] : handles) store->source->Abandon(handle);
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
