#include "compute_node.h"

#include "absl/strings/str_cat.h"
#include "colibri/backend/cpu_backend.h"
#include "colibri/core/checksum.h"
#include "colibri/core/status.h"
#include "colibri/core/units.h"

namespace colibri::compute {

absl::StatusOr<std::unique_ptr<ComputeNode>> ComputeNode::Create(const ComputeNodeOptions& options) {
  auto node = std::unique_ptr<ComputeNode>(new ComputeNode());
  ASSIGN_OR_RETURN(node->container_, model::Container::Open(options.model_dir));
  const model::Manifest& m = node->container_->manifest();
  uint64_t largest = 0;
  for (const auto& b : m.experts) largest = std::max(largest, b.size);
  if (options.expert_cache_bytes < 2 * largest) {
    return absl::InvalidArgumentError(absl::StrCat("--expert-cache-size ", FormatSize(options.expert_cache_bytes),
                                                   " is below two expert blocks (", FormatSize(2 * largest),
                                                   ") of model '", m.name, "'"));
  }
  if (options.stores.empty()) {
    ASSIGN_OR_RETURN(auto disk,
                     expert_source::DiskSource::Open(node->container_.get(), {.direct_io = options.cache.direct_io}));
    node->disk_ = disk.get();
    node->origin_ = std::move(disk);
  } else {
    rpc::MultiStoreOptions mo;
    mo.targets = options.stores;
    mo.model = m.name;
    mo.client_name = options.client_name;
    uint64_t largest_padded = 0;
    for (const auto& b : m.experts) largest_padded = std::max(largest_padded, b.padded_size);
    mo.shm_bytes = options.store_shm_bytes != ComputeNodeOptions::kAutoShm
                       ? options.store_shm_bytes
                       : options.expert_cache_bytes + 2 * static_cast<uint64_t>(m.config.n_experts) * largest_padded;
    ASSIGN_OR_RETURN(auto remote, rpc::MultiStoreSource::Connect(mo, &node->container_->manifest()));
    node->stores_ = remote.get();
    node->origin_ = std::move(remote);
  }
  node->backend_ = backend::CreateCpuBackend({.threads = options.threads});
  ASSIGN_OR_RETURN(node->cache_, ExpertCache::Create(node->origin_.get(), *node->container_, options.expert_cache_bytes,
                                                     options.cache, *node->backend_));
  ASSIGN_OR_RETURN(node->model_,
                   engine::Model::Load(*node->container_, node->backend_.get(), node->cache_->front(),
                                       {.prefetch_layers = options.cache.prefetch_layers,
                                        .prefetch_min_weight = options.cache.prefetch_min_weight,
                                        .trace = node->cache_->trace()}));
  engine::EngineOptions eo;
  eo.prefill_chunk = options.prefill_chunk;
  eo.kv_cache_limit = options.kv_cache_limit;
  eo.max_active = options.max_batch;
  eo.max_queued = options.max_queued;
  if (options.kv_offload_limit > 0 || !options.kv_persist_dir.empty()) {
    const model::ModelConfig& c = node->model_->config();
    engine::KvStoreOptions ko;
    ko.ram_limit = options.kv_offload_limit;
    ko.eight_bit = options.kv_offload_8bit;
    ko.dir = options.kv_persist_dir;
    // Caches are only reused by the very same model (manifest, so weights' checksums included).
    const std::string manifest = model::ManifestToJson(node->container_->manifest()).dump();
    ko.model_fingerprint = ChecksumHex(Checksum64(manifest.data(), manifest.size()));
    ko.n_layers = c.n_layers;
    ko.kv_dim = c.n_kv_heads * c.head_dim;
    ASSIGN_OR_RETURN(node->kv_store_, engine::KvStore::Open(std::move(ko)));
    eo.kv_store = node->kv_store_.get();
  }
  node->engine_ = std::make_unique<engine::Engine>(node->model_.get(), eo);
  return node;
}

absl::Status ComputeNode::AddStore(const std::string& target) {
  if (stores_ == nullptr) {
    return absl::FailedPreconditionError("this node reads experts from its model directory, not from expert stores");
  }
  stores_->AddStore(target);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ComputeNode::PreloadExperts() {
  const auto& c = manifest().config;
  expert_source::CacheTier* cache = &cache_->ram();
  for (int32_t l = 0; l < c.n_layers; ++l) {
    for (int32_t e = 0; e < c.n_experts; ++e) {
      const expert_source::ExpertId id{l, e};
      if (cache->Stats().bytes_cached + cache->BlockSize(id) > cache->Stats().capacity_bytes) {
        return static_cast<int64_t>(cache->Stats().blocks_cached);
      }
      RETURN_IF_ERROR(cache->Fetch(id, expert_source::Priority::kPrefetch).status());
    }
  }
  return static_cast<int64_t>(cache->Stats().blocks_cached);
}

}  // namespace colibri::compute
