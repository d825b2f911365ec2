#include "colibri/rpc/shm_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "colibri/core/units.h"

namespace colibri::rpc {

namespace {
absl::Status ShmError(int err, std::string_view op, const std::string& name) {
  std::string msg =
      absl::StrCat(std::string(op), " shared memory '", name, "': ", std::strerror(err));
  if (err == ENOSPC || err == ENOMEM) return absl::ResourceExhaustedError(msg);
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::UnavailableError(msg);
}
}  // namespace

absl::StatusOr<std::unique_ptr<ShmRegion>> ShmRegion::Create(size_t size) {
  auto r = std::unique_ptr<ShmRegion>(new ShmRegion());
  std::random_device rd;
  r->size_ = AlignUp(size, 4096);
  for (int attempt = 0; attempt < 8 && r->fd_ < 0; ++attempt) {
    r->name_ = absl::StrCat("/colibri-", ::getpid(), "-", rd(), rd());
    r->fd_ = ::shm_open(r->name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (r->fd_ < 0 && errno != EEXIST) return ShmError(errno, "create", r->name_);
  }
  if (r->fd_ < 0) return ShmError(EEXIST, "create", r->name_);
  r->owner_ = true;
  r->linked_ = true;
  if (::ftruncate(r->fd_, static_cast<off_t>(r->size_)) != 0)
    return ShmError(errno, "size", r->name_);
  void* p = ::mmap(nullptr, r->size_, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd_, 0);
  if (p == MAP_FAILED) return ShmError(errno, "map", r->name_);
  r->data_ = static_cast<uint8_t*>(p);
  return r;
}

absl::StatusOr<std::unique_ptr<ShmRegion>> ShmRegion::Attach(const std::string& name, size_t size) {
  auto r = std::unique_ptr<ShmRegion>(new ShmRegion());
  r->name_ = name;
  if (name.empty() || name[0] != '/' || name.find('/', 1) != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory name '", name, "' is not of the form /name"));
  }
  r->fd_ = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (r->fd_ < 0) return ShmError(errno, "open", name);
  struct stat st;
  if (::fstat(r->fd_, &st) != 0) return ShmError(errno, "stat", name);
  if (st.st_uid != ::geteuid()) {
    return absl::PermissionDeniedError(
        absl::StrCat("shared memory '", name, "' belongs to another user"));
  }
  if (static_cast<uint64_t>(st.st_size) < size || size == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared memory '", name, "' has ", st.st_size, " bytes, expected ", size));
  }
  r->size_ = size;
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd_, 0);
  if (p == MAP_FAILED) return ShmError(errno, "map", name);
  r->data_ = static_cast<uint8_t*>(p);
  return r;
}

ShmRegion::~ShmRegion() {
  if (data_ != nullptr) ::munmap(data_, size_);
  if (fd_ >= 0) ::close(fd_);
  Unlink();
}

void ShmRegion::Unlink() {
  if (owner_ && linked_) {
    ::shm_unlink(name_.c_str());
    linked_ = false;
  }
}

absl::Status ShmRegion::Commit(uint64_t end) {
  std::lock_guard<std::mutex> lock(commit_mu_);
  end = std::min<uint64_t>(AlignUp(end, 4096), size_);
  if (end <= committed_) return absl::OkStatus();
  int rc =
      ::posix_fallocate(fd_, static_cast<off_t>(committed_), static_cast<off_t>(end - committed_));
  if (rc != 0) return ShmError(rc, "reserve pages of", name_);
  committed_ = end;
  return absl::OkStatus();
}

}  // namespace colibri::rpc
