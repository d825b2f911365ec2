#include "colibri/expert_source/mmap_source.h"

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "colibri/expert_source/expert_label.h"

namespace colibri::expert_source {

absl::StatusOr<std::unique_ptr<MmapSource>> MmapSource::Open(const model::Container* container) {
  auto src = std::unique_ptr<MmapSource>(new MmapSource(container));
  const auto& m = container->manifest();
  for (const auto& b : m.experts) {
    if (!b.ranges.empty()) {
      return absl::FailedPreconditionError(
          "a GGUF served in place has blocks gathered from several ranges: read it with "
          "the local reader (StripedSource), not mmap");
    }
    if (src->maps_.count(b.file)) continue;
    auto f = MappedFile::Open(container->ExpertFilePath(b));
    if (!f.ok()) return f.status();
    src->maps_[b.file] = std::make_shared<MappedFile>(std::move(*f));
  }
  src->verified_.assign(static_cast<size_t>(m.config.n_layers * m.config.n_experts), false);
  return src;
}

uint64_t MmapSource::BlockSize(ExpertId id) const {
  if (!container_->manifest().HasExpert(id)) return 0;
  return container_->manifest().Expert(id).padded_size;
}

absl::StatusOr<Lease> MmapSource::Fetch(ExpertId id, Priority) {
  const auto& m = container_->manifest();
  if (!m.HasExpert(id)) {
    return absl::NotFoundError(absl::StrCat(ExpertLabel(id), " is not in model '", m.name, "'"));
  }
  const model::ExpertBlock& b = m.Expert(id);
  const auto& map = maps_.at(b.file);
  if (b.offset + b.size > map->size()) {
    return absl::DataLossError(absl::StrCat(
        ExpertLabel(id), " in '", container_->ExpertFilePath(b).string(), "': file too short"));
  }
  const uint8_t* bytes = map->data() + b.offset;
  const size_t index = static_cast<size_t>(id.layer * m.config.n_experts + id.expert);
  bool verified;
  {
    std::lock_guard<std::mutex> lock(mu_);
    verified = verified_[index];
  }
  if (!verified) {
    RETURN_IF_ERROR(
        container_->VerifyExpertBlock(b, bytes, container_->ExpertFilePath(b).string()));
    std::lock_guard<std::mutex> lock(mu_);
    verified_[index] = true;
  }
  auto block = std::make_shared<Block>();
  block->id = id;
  block->size = b.size;
  block->external = bytes;
  block->external_owner = map;
  return Lease(std::move(block));
}

}  // namespace colibri::expert_source
