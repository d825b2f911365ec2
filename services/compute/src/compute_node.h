// A compute node: the model's dense weights resident on a backend (CPU, or a GPU with
// --backend cuda), experts streamed from a source (the local model directory, or expert-store
// services over gRPC) through a host-RAM cache tier (and a VRAM tier with --vram-budget), and
// the engine that runs requests. On a GPU, dense weights + --kv-cache-limit + --vram-budget are
// checked against the device's free memory before anything is loaded (ResourceExhausted naming
// the numbers, never an out-of-memory mid-request). Used by colibri-compute, colibri-server and
// colibri-cli alike, so every mode runs the same code.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/backend/backend.h"
#include "colibri/engine/engine.h"
#include "colibri/engine/kv_store.h"
#include "colibri/engine/resident_experts.h"
#include "colibri/expert_source/cache_tier.h"
#include "colibri/model/container.h"
#include "colibri/plan/planner.h"
#include "colibri/rpc/multi_store_source.h"
#include "colibri/rpc/remote_store_source.h"
#include "colibri/store/striped_source.h"
#include "expert_cache.h"
#include "nlohmann/json.hpp"

namespace colibri::compute {

// How the auto settings were resolved (auto_settings.h).
struct AutoSettingsReport {
  bool planned = false;      // something was auto
  std::string profile_path;  // the tune profile looked at ("" when none was)
  bool profile_applied = false;
  std::string profile_note;  // why it was or was not applied
  // The host-memory budget (--memory-limit) and its split, with the values in effect; zeros
  // when nothing was planned (every budget given explicitly).
  uint64_t memory_budget = 0;
  plan::MemorySplit memory;
};

struct ComputeNodeOptions {
  std::string model_dir;
  // Expert stores (host:port or unix:/path). Empty: read experts from model_dir directly.
  // Several: reads spread over the holders of each expert, failing over when one dies.
  std::vector<std::string> stores;
  // Shared-memory region per co-located (unix:) store: blocks land in it without copies and
  // stay there while cached. kAutoShm: the cache size plus two layers of blocks in flight.
  static constexpr uint64_t kAutoShm = ~0ull;
  uint64_t store_shm_bytes = kAutoShm;  // 0: chunks on the stream only
  std::string client_name;              // how the stores' metrics name this node
  std::shared_ptr<const auth::Transport>
      transport;  // links to the stores (null: plaintext, loopback only)
  // kAuto in a budget (expert_cache_bytes, cache.vram_bytes, kv_cache_limit), -1 in a knob
  // (cache.prefetch_layers, cache.io_threads, cache.learned_pin_fraction) and an empty
  // cache.policy: chosen at Create by the planner and a matching tune profile
  // (auto_settings.h), and logged.
  static constexpr uint64_t kAuto = ~0ull;
  // The host-memory budget (kAuto: planned from the cgroup limit or MemAvailable). The
  // planner's split is checked against it at Create; see ComputeNode::memory().
  uint64_t memory_limit = kAuto;
  uint64_t expert_cache_bytes = 2ull << 30;
  ExpertCacheConfig cache;  // tiers, policy, pins, prefetch, trace (expert_cache.h)
  // Bytes of KV caches (dense weights are separate); 0: unlimited. kAutoKvLimit: derived from
  // the model and the free memory at start (colibri/plan/kv_limit.h), and logged.
  static constexpr uint64_t kAutoKvLimit = kAuto;
  std::string tune_profile;  // "" : <model>/tune_profile.json; "none": not read
  uint64_t kv_cache_limit = kAutoKvLimit;
  uint64_t kv_offload_limit = 0;  // host RAM for KV caches evicted from kv_cache_limit (0: none)
  bool kv_offload_8bit = false;   // offloaded KV kept as Q8_0 (3.8x smaller, approximate restore)
  std::string kv_persist_dir;     // evicted / shutdown KV caches on disk; reopened warm on restart
  uint64_t kv_persist_limit = 0;  // bytes of files there, oldest deleted first (0: no cap)
  int max_batch = 16;             // sequences in one continuous batch
  int max_queued = 256;           // requests waiting for a slot (more: ResourceExhausted)
  int threads = 0;                // 0: UsableCoreCount() (affinity mask, cgroup quota)
  bool fixed_threads = false;     // CPU: every op on all threads (backend/cpu_backend.h)
  std::string backend = "cpu";    // --backend cpu | cuda
  int device = 0;                 // --device: CUDA device index
  int64_t prefill_chunk = 512;
  bool fair_prefill = true;  // engine::EngineOptions::fair_prefill
  // Speculative decoding (colibri/engine/speculative.h): --speculative off|auto|ngram|self|draft|mtp,
  // --draft-max, and the drafter models: --draft-experts TYPE (self: a copy of the experts
  // quantized to TYPE at load and held in RAM, with the dense weights) or --draft-model DIR
  // (draft: a second colibri model with the same vocabulary, its experts held in RAM).
  std::string speculative = "off";
  int draft_max = 4;
  std::string draft_experts;
  std::string draft_model_dir;
  // auto's measured costs to start from (engine::PassCosts::ToJson), from a tune profile that
  // matches this machine, under SpeculationKey(*this); null: measured from scratch.
  nlohmann::json speculation_costs;
};

// What a tune profile files auto's speculation costs under: the drafter they were measured with.
std::string SpeculationKey(const ComputeNodeOptions& o);

using expert_source::ExpertUse;
// The most used experts of a request (GenerationResult::expert_counts): per layer the up to
// 2 * top_k with the highest counts, layer by layer.
std::vector<ExpertUse> TopExperts(const std::vector<uint32_t>& counts,
                                  const model::ModelConfig& config);

class ComputeNode {
 public:
  static absl::StatusOr<std::unique_ptr<ComputeNode>> Create(const ComputeNodeOptions& requested);

  engine::Engine& engine() { return *engine_; }
  // Prefetch hints from the router: starts loading these experts at prefetch priority, the
  // first ones first, at most half the host-RAM expert cache's worth. Returns how many were
  // passed on; InvalidArgument for an id outside the model.
  absl::StatusOr<size_t> PrefetchHint(std::span<const expert_source::ExpertId> ids);
  uint64_t prefetch_hints() const { return prefetch_hints_.load(); }
  // Where evicted KV caches go (nullptr without --kv-offload-limit / --kv-persist-dir).
  const engine::KvStore* kv_store() const { return kv_store_.get(); }
  const model::Manifest& manifest() const { return container_->manifest(); }
  const model::Container& container() const { return *container_; }
  const std::string& model_name() const { return container_->manifest().name; }
  expert_source::CacheStats cache_stats() const { return cache_->ram().Stats(); }
  expert_source::CacheTier::ClearResult ClearCache() { return cache_->Clear(); }
  ExpertCache& expert_cache() { return *cache_; }
  const engine::Model& model() const { return *model_; }
  // The drafter's experts held in RAM (self or draft speculation), or nullptr.
  const engine::ResidentExperts* draft_experts() const { return draft_experts_.get(); }
  const backend::Backend& backend() const { return *backend_; }
  // The local read path (nullptr when experts come from stores).
  const store::StripedSource* disk() const { return disk_; }
  // Reads expert blocks into the cache, layer by layer, until it is full (or all are in).
  // Returns the number of blocks resident afterwards.
  absl::StatusOr<int64_t> PreloadExperts();
  // Bytes read from disk or received from stores (below the cache).
  uint64_t expert_bytes_fetched() const { return cache_->ram().Stats().bytes_fetched; }
  // The expert stores and their state (empty when experts come from the model directory).
  std::vector<rpc::StoreState> store_states() const {
    return stores_ ? stores_->Stores() : std::vector<rpc::StoreState>{};
  }
  uint64_t store_failovers() const { return stores_ ? stores_->failovers() : 0; }
  // Adds an expert store to a running node (it takes reads once a probe finds it up).
  // FailedPrecondition when experts come from the model directory; InvalidArgument for a
  // malformed target; AlreadyExists for a store the node has already.
  absl::Status AddStore(const std::string& target);
  // The block arena expert blocks are read into (nullptr with shared-memory stores).
  const BlockArena* arena() const { return arena_.get(); }
  // The options in effect: every auto value resolved (auto_settings.h).
  const ComputeNodeOptions& options() const { return options_; }
  const AutoSettingsReport& auto_settings() const { return auto_settings_; }

 private:
  ComputeNode() = default;
  std::unique_ptr<model::Container> container_;
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<BlockArena> arena_;  // outlives origin_ and the cache: declared first
  std::unique_ptr<expert_source::ExpertSource> origin_;  // disk or remote stores
  rpc::MultiStoreSource* stores_ = nullptr;              // origin_, when it is the stores
  store::StripedSource* disk_ = nullptr;                 // origin_, when it is the disk
  std::unique_ptr<ExpertCache> cache_;
  std::unique_ptr<engine::Model> model_;
  // Speculative decoding's drafter: a draft model's directory and its disk (--draft-model), the
  // experts it runs on, in RAM, and the model (which shares model_'s weights for self-drafting).
  std::unique_ptr<model::Container> draft_container_;
  std::unique_ptr<store::StripedSource> draft_disk_;
  std::unique_ptr<engine::ResidentExperts> draft_experts_;
  std::unique_ptr<engine::Model> draft_model_;
  std::unique_ptr<engine::Model> mtp_model_;   // the model's MTP layer (--speculative mtp, auto)
  std::unique_ptr<engine::KvStore> kv_store_;  // outlives engine_ (which persists into it)
  std::unique_ptr<engine::Engine> engine_;
  std::atomic<uint64_t> prefetch_hints_{0};  // expert prefetches started from router hints
  ComputeNodeOptions options_;
  AutoSettingsReport auto_settings_;

  // Loads the drafter the speculation options ask for (none for off, ngram, and auto without one).
  absl::Status LoadDrafter(const ComputeNodeOptions& options);
};

}  // namespace colibri::compute
