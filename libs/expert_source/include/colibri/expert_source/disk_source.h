// Reads expert blocks straight from a local model directory (experts.bin or split files) with
// pread into 4 KiB-aligned buffers, verifying each checksum. Caches nothing: put a CacheTier in
// front of it. Thread-safe; keeps one open descriptor per file.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "colibri/expert_source/expert_source.h"
#include "colibri/model/container.h"

namespace colibri::expert_source {

class DiskSource final : public ExpertSource {
 public:
  // `container` must outlive the source.
  static absl::StatusOr<std::unique_ptr<DiskSource>> Open(const model::Container* container);
  ~DiskSource() override;

  absl::StatusOr<Lease> Fetch(ExpertId id, Priority priority) override;
  uint64_t BlockSize(ExpertId id) const override;

  uint64_t bytes_read() const { return bytes_read_.load(); }

 private:
  explicit DiskSource(const model::Container* container) : container_(container) {}

  const model::Container* container_;
  std::map<std::string, int> fds_;  // file -> descriptor, fixed after Open
  std::atomic<uint64_t> bytes_read_{0};
};

}  // namespace colibri::expert_source
