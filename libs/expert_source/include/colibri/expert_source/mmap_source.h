// Expert blocks straight out of a read-only mapping of the model's expert files: the "mmap
// everything and let the OS page" approach (what llama.cpp does), kept as a baseline for the
// benchmarks. Leases point into the mapping; the kernel decides what stays in RAM, so there is no
// budget of our own (bound it with a memory cgroup). A block's checksum is verified on its first
// fetch only: verifying on every fetch would read every page twice. Thread-safe.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "colibri/core/file_util.h"
#include "colibri/expert_source/expert_source.h"
#include "colibri/model/container.h"

namespace colibri::expert_source {

class MmapSource final : public ExpertSource {
 public:
  // `container` must outlive the source.
  static absl::StatusOr<std::unique_ptr<MmapSource>> Open(const model::Container* container);

  absl::StatusOr<Lease> Fetch(ExpertId id, Priority priority) override;
  uint64_t BlockSize(ExpertId id) const override;

 private:
  explicit MmapSource(const model::Container* container) : container_(container) {}

  const model::Container* container_;
  std::map<std::string, std::shared_ptr<MappedFile>> maps_;  // file -> mapping, fixed after Open
  std::mutex mu_;
  std::vector<bool> verified_;  // per block index (layer * n_experts + expert)
};

}  // namespace colibri::expert_source
