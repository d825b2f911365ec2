// A compute node: the model's dense weights resident on a backend, experts streamed from a
// source (the local model directory, or expert-store services over gRPC) through a host-RAM
// cache tier, and the engine that runs requests. Used by colibri-compute, colibri-server and
// colibri-cli alike, so every mode runs the same code.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/backend/backend.h"
#include "colibri/engine/engine.h"
#include "colibri/expert_source/cache_tier.h"
#include "colibri/expert_source/disk_source.h"
#include "colibri/model/container.h"
#include "colibri/rpc/remote_store_source.h"

namespace colibri::compute {

struct ComputeNodeOptions {
  std::string model_dir;
  // Expert stores (host:port or unix:path). Empty: read experts from model_dir directly.
  std::vector<std::string> stores;
  uint64_t expert_cache_bytes = 2ull << 30;
  int threads = 0;                 // 0: physical cores
  int64_t prefill_chunk = 512;
};

class ComputeNode {
 public:
  static absl::StatusOr<std::unique_ptr<ComputeNode>> Create(const ComputeNodeOptions& options);

  engine::Engine& engine() { return *engine_; }
  const model::Manifest& manifest() const { return container_->manifest(); }
  const std::string& model_name() const { return container_->manifest().name; }
  expert_source::CacheStats cache_stats() const { return cache_->Stats(); }
  void ClearCache() { cache_->Clear(); }
  // Reads expert blocks into the cache, layer by layer, until it is full (or all are in).
  // Returns the number of blocks resident afterwards.
  absl::StatusOr<int64_t> PreloadExperts();
  // Bytes read from disk or received from stores (below the cache).
  uint64_t expert_bytes_fetched() const { return cache_->Stats().bytes_fetched; }

 private:
  ComputeNode() = default;
  std::unique_ptr<model::Container> container_;
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<expert_source::ExpertSource> origin_;  // disk or remote store
  std::unique_ptr<expert_source::CacheTier> cache_;
  std::unique_ptr<engine::Model> model_;
  std::unique_ptr<engine::Engine> engine_;
};

}  // namespace colibri::compute
