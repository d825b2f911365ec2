#include "compute_node.h"

#include "absl/strings/str_cat.h"
#include "colibri/backend/cpu_backend.h"
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
    ASSIGN_OR_RETURN(auto disk, expert_source::DiskSource::Open(node->container_.get()));
    node->origin_ = std::move(disk);
  } else {
    if (options.stores.size() > 1) {
      return absl::UnimplementedError("several --store targets are not supported yet: give one");
    }
    rpc::RemoteStoreOptions ro;
    ro.target = options.stores[0];
    ro.model = m.name;
    ASSIGN_OR_RETURN(auto remote, rpc::RemoteStoreSource::Connect(ro, &node->container_->manifest()));
    node->origin_ = std::move(remote);
  }
  node->cache_ = std::make_unique<expert_source::CacheTier>(node->origin_.get(), options.expert_cache_bytes);
  node->backend_ = backend::CreateCpuBackend({.threads = options.threads});
  ASSIGN_OR_RETURN(node->model_, engine::Model::Load(*node->container_, node->backend_.get(), node->cache_.get()));
  node->engine_ = std::make_unique<engine::Engine>(node->model_.get(), engine::EngineOptions{options.prefill_chunk});
  return node;
}

absl::StatusOr<int64_t> ComputeNode::PreloadExperts() {
  const auto& c = manifest().config;
  for (int32_t l = 0; l < c.n_layers; ++l) {
    for (int32_t e = 0; e < c.n_experts; ++e) {
      const expert_source::ExpertId id{l, e};
      if (cache_->Stats().bytes_cached + cache_->BlockSize(id) > cache_->Stats().capacity_bytes) {
        return static_cast<int64_t>(cache_->Stats().blocks_cached);
      }
      RETURN_IF_ERROR(cache_->Fetch(id, expert_source::Priority::kPrefetch).status());
    }
  }
  return static_cast<int64_t>(cache_->Stats().blocks_cached);
}

}  // namespace colibri::compute
