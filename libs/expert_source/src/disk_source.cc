#include "colibri/expert_source/disk_source.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "colibri/core/checksum.h"
#include "colibri/core/status.h"

namespace colibri::expert_source {

absl::StatusOr<std::unique_ptr<DiskSource>> DiskSource::Open(const model::Container* container) {
  auto src = std::unique_ptr<DiskSource>(new DiskSource(container));
  for (const auto& b : container->manifest().experts) {
    if (src->fds_.count(b.file)) continue;
    auto path = container->ExpertFilePath(b);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(errno, "open expert file", path);
    src->fds_[b.file] = fd;
  }
  return src;
}

DiskSource::~DiskSource() {
  for (auto& [f, fd] : fds_) ::close(fd);
}

uint64_t DiskSource::BlockSize(ExpertId id) const {
  const auto& c = container_->manifest().config;
  if (id.layer < 0 || id.layer >= c.n_layers || id.expert < 0 || id.expert >= c.n_experts) return 0;
  return container_->manifest().Expert(id.layer, id.expert).padded_size;
}

absl::StatusOr<Lease> DiskSource::Fetch(ExpertId id, Priority) {
  const auto& m = container_->manifest();
  if (id.layer < 0 || id.layer >= m.config.n_layers || id.expert < 0 || id.expert >= m.config.n_experts) {
    return absl::NotFoundError(absl::StrCat("expert (layer ", id.layer, ", id ", id.expert, ") is not in model '",
                                            m.name, "'"));
  }
  const model::ExpertBlock& b = m.Expert(id.layer, id.expert);
  auto block = std::make_shared<Block>();
  block->id = id;
  block->size = b.size;
  ASSIGN_OR_RETURN(block->bytes, AllocateAligned(b.padded_size, 4096));
  const int fd = fds_.at(b.file);
  uint64_t done = 0;
  while (done < b.size) {
    ssize_t n = ::pread(fd, block->bytes.get() + done, b.padded_size - done, static_cast<off_t>(b.offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, absl::StrCat("read expert (layer ", id.layer, ", id ", id.expert, ") from"),
                                  container_->ExpertFilePath(b));
    if (n == 0) {
      return absl::DataLossError(absl::StrCat("expert (layer ", id.layer, ", id ", id.expert, ") in '",
                                              container_->ExpertFilePath(b).string(), "': short read (", done, " of ",
                                              b.size, " bytes)"));
    }
    done += static_cast<uint64_t>(n);
  }
  bytes_read_ += done;
  uint64_t got = Checksum64(block->bytes.get(), b.size);
  if (got != b.checksum) return model::ExpertChecksumError(b, container_->ExpertFilePath(b).string(), got);
  return Lease(std::move(block));
}

}  // namespace colibri::expert_source
