// ExpertSource over several expert stores holding copies (whole or partial) of one model.
//
// - Each store advertises what it holds (ListModels: full copy, or a bitmap of experts); a
//   fetch goes to the holder that should deliver it first: (bytes outstanding there + the
//   block) / the store's measured rate. A faster store takes more of the load, a slow one
//   less, and adding a store adds its bandwidth. Rates older than a few seconds are forgotten,
//   so a store that recovered gets tried again. A batch (FetchMany) is split by holder, each
//   block counting the bytes the batch already sends there, and goes as one batch per store;
//   Promote and Cancel reach the store holding the request.
// - A block big enough is read from several holders at once: each up holder takes a part
//   (SplitAcrossHolders: the parts end together given each store's queue and rate, none below
//   `split_min_bytes`), the parts land in one buffer, and the assembled block is verified
//   against the manifest's checksum. A part that fails, or a block that does not verify, is
//   read again whole from one holder (the failing store excluded), which verifies it itself.
// - A fetch that fails on one store with Unavailable (the store died or its stream broke),
//   DataLoss (a corrupt copy) or NotFound (it no longer holds the block) is retried on another
//   holder, so a dying store does not fail a request while another copy exists. Reads are
//   idempotent; each store is tried at most once per fetch.
// - A store that failed is marked down and probed in the background every `probe_interval`;
//   stores listed but unreachable at start, and stores added later (AddStore), join the
//   rotation when a probe succeeds.
// Thread-safe. The manifest must outlive the source.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "colibri/expert_source/expert_source.h"
#include "colibri/model/manifest.h"
#include "colibri/rpc/remote_store_source.h"

namespace colibri::rpc {

struct MultiStoreOptions {
  std::vector<std::string> targets;  // host:port or unix:/path
  std::string model;
  std::chrono::milliseconds fetch_timeout{60000};
  std::chrono::milliseconds probe_interval{1000};
  std::string client_name;  // colibri-client metadata for the stores' metrics
  uint64_t shm_bytes = 0;   // shared-memory region per unix: store (0: chunks only)
  // Smallest part when one block is read from several holders at once (0: whole blocks only).
  // A part is one request: below about a millisecond of a store's bandwidth it costs more than
  // it spreads.
  uint64_t split_min_bytes = 1 << 20;
  std::shared_ptr<const auth::Transport> transport;  // see RemoteStoreOptions
  BlockArena* arena = nullptr;                       // see RemoteStoreOptions
  BlockVerifier verify;                              // see RemoteStoreOptions
};

struct StoreState {
  std::string target;
  bool up = false;
  bool full_copy = false;
  RemoteStoreStats stats;
};

class MultiStoreSource final : public expert_source::ExpertSource {
 public:
  // Probes every store. Fails when none is reachable (Unavailable, naming them) or when the
  // reachable ones together miss an expert of the model (FailedPrecondition naming it).
  static absl::StatusOr<std::unique_ptr<MultiStoreSource>> Connect(const MultiStoreOptions& options,
                                                                   const model::Manifest* manifest);
  ~MultiStoreSource() override;

  absl::StatusOr<expert_source::Lease> Fetch(expert_source::ExpertId id,
                                             expert_source::Priority priority) override;
  absl::Status FetchMany(
      std::span<const expert_source::ExpertId> ids,
      const std::function<void(size_t, expert_source::Lease)>& on_ready,
      expert_source::Priority priority = expert_source::Priority::kDemand) override;
  // Passed on to every store; the one whose requests these are tells its store.
  void Promote(std::span<const expert_source::ExpertId> ids) override;
  void Cancel(std::span<const expert_source::ExpertId> ids) override;
  uint64_t BlockSize(expert_source::ExpertId id) const override;

  // Adds a store to a running source; it takes reads once a probe finds it up.
  // InvalidArgument for a malformed target (or one the transport refuses), AlreadyExists for a
  // target the source has already.
  absl::Status AddStore(const std::string& target);
  std::vector<StoreState> Stores() const;
  uint64_t failovers() const { return failovers_.load(); }
  // Blocks delivered assembled from parts read from several stores.
  uint64_t split_blocks() const { return split_blocks_.load(); }

 private:
  struct Store {
    std::atomic<bool> up{false};  // first: outlives `source` (whose reader may still set it)
    // Measured delivery rate (bytes/s, moving average of fetches) and when it was last
    // measured; a rate older than a few seconds counts as unknown, so the store is tried again.
    std::atomic<double> rate{0};
    std::atomic<int64_t> rate_at_ns{0};
    std::unique_ptr<RemoteStoreSource> source;
  };
  class Request;
  using Done = std::function<void(absl::StatusOr<expert_source::Lease>)>;

  MultiStoreSource(const MultiStoreOptions& options, const model::Manifest* manifest);
  absl::StatusOr<std::unique_ptr<Store>> MakeStore(const std::string& target);
  std::vector<Store*> Snapshot() const;
  // Starts (or restarts after a failure) a fetch on the best holder not tried yet.
  void Attempt(const std::shared_ptr<Request>& req);
  void AttemptOnce(const std::shared_ptr<Request>& req);
  // The first attempt of a batch's requests: each to its best holder, one batch per store.
  void StartBatch(const std::vector<std::shared_ptr<Request>>& reqs,
                  expert_source::Priority priority, std::chrono::steady_clock::time_point deadline);
  // The holder not tried yet that should deliver `req` first (nullptr: none), counting
  // `planned` bytes about to be sent to each store. Requires req.mu.
  Store* Choose(const Request& req, const std::vector<Store*>& stores,
                const std::map<const Store*, uint64_t>& planned);
  // Records the choice; false when abandoned, or when no holder is left (then `done` ran).
  bool Assign(const std::shared_ptr<Request>& req, Store* best);
  // Fails a request no store (left) holds, with its last error.
  void FailUnheld(const std::shared_ptr<Request>& req);
  // What a store's answer to `req` does: rate sample, then done, or a retry elsewhere.
  RemoteStoreSource::Callback OnAnswer(const std::shared_ptr<Request>& req, Store* store);
  // What a store's answer to one part of a split `req` does: the last part verifies the block
  // and hands it out; a failed part abandons the others and reads the block whole.
  RemoteStoreSource::Callback OnPart(const std::shared_ptr<Request>& req, Store* store,
                                     uint64_t bytes);
  // A store's measured rate, or `fallback` when unknown or stale.
  static double RateOf(const Store& store, int64_t now_ns, double fallback);
  static double BestRate(const std::vector<Store*>& stores, int64_t now_ns);
  static void Sample(Store& store, uint64_t bytes, std::chrono::steady_clock::time_point t0);
  // Plans the parts of `req` over the up holders (nullopt: read it whole).
  std::optional<std::vector<std::pair<Store*, RemoteStoreSource::Part>>> PlanParts(
      const std::shared_ptr<Request>& req, const std::vector<Store*>& stores,
      const std::map<const Store*, uint64_t>& planned, int64_t now_ns, double best_rate);
  void MarkDown(Store& store, const absl::Status& why);
  void ProbeLoop();
  absl::Status RunMany(std::span<const expert_source::ExpertId> ids,
                       expert_source::Priority priority,
                       const std::function<void(size_t, expert_source::Lease)>& on_ready);

  const MultiStoreOptions options_;
  const model::Manifest* manifest_;
  // Stores are only added, and destroyed with this source: a RemoteStoreSource must never be
  // destroyed on its own reader thread, where its callbacks (and so Attempt) run.
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Store>> stores_;
  int attempts_running_ = 0;  // Attempt calls in progress (the destructor waits for them)
  std::atomic<uint64_t> failovers_{0};
  std::atomic<uint64_t> split_blocks_{0};
  std::atomic<uint64_t> rotation_{0};
  std::condition_variable probe_cv_;
  bool stopping_ = false;
  std::thread prober_;
};

}  // namespace colibri::rpc
