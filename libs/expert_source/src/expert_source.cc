#include "colibri/expert_source/expert_source.h"

namespace colibri::expert_source {

absl::Status ExpertSource::FetchMany(std::span<const ExpertId> ids,
                                     const std::function<void(size_t, Lease)>& on_ready,
                                     Priority priority) {
  for (size_t i = 0; i < ids.size(); ++i) {
    auto lease = Fetch(ids[i], priority);
    if (!lease.ok()) return lease.status();
    on_ready(i, std::move(*lease));
  }
  return absl::OkStatus();
}

absl::Status ExpertSource::FetchGroups(
    std::span<const ExpertId> ids,
    const std::function<void(std::span<std::pair<size_t, Lease>>)>& on_group, Priority priority) {
  return FetchMany(
      ids,
      [&](size_t i, Lease lease) {
        std::pair<size_t, Lease> one(i, std::move(lease));
        on_group(std::span<std::pair<size_t, Lease>>(&one, 1));
      },
      priority);
}

}  // namespace colibri::expert_source
