#include "colibri/core/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"

namespace colibri {

absl::Status ErrnoStatus(int err, std::string_view op, const std::filesystem::path& path) {
  std::string msg = absl::StrCat(std::string(op), " '", path.string(), "': ", std::strerror(err));
  switch (err) {
    case ENOENT: return absl::NotFoundError(msg);
    case EACCES:
    case EPERM: return absl::PermissionDeniedError(msg);
    case ENOSPC:
    case ENOMEM: return absl::ResourceExhaustedError(msg);
    case EIO: return absl::DataLossError(msg);
    default: return absl::InternalError(msg);
  }
}

absl::StatusOr<std::string> ReadFileToString(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "open", path);
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return ErrnoStatus(err, "read", path);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

absl::Status SyncDirectory(const std::filesystem::path& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "open directory", dir);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // Some filesystems refuse fsync on directories (EINVAL); durability is then best effort.
  if (rc != 0 && err != EINVAL) return ErrnoStatus(err, "fsync directory", dir);
  return absl::OkStatus();
}

absl::Status WriteFileAtomic(const std::filesystem::path& path, std::string_view data,
                             unsigned mode) {
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, static_cast<mode_t>(mode));
  if (fd < 0) return ErrnoStatus(errno, "create", tmp);
  // Every failure past this point leaves no temp file behind (a full disk must not fill up
  // further with partial writes that nobody will finish).
  auto fail = [&](int err, std::string_view op) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    return ErrnoStatus(err, op, tmp);
  };
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(errno, "write");
    }
    off += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) return fail(errno, "fsync");
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) return fail(errno, "close");
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail(errno, "rename");
  return SyncDirectory(path.parent_path());
}

absl::StatusOr<MappedFile> MappedFile::Open(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "open", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "stat", path);
  }
  MappedFile f;
  f.size_ = static_cast<size_t>(st.st_size);
  if (f.size_ > 0) {
    void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return ErrnoStatus(err, "mmap", path);
    }
    f.data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return f;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void MappedFile::ReleasePages() const {
  if (data_) ::madvise(const_cast<uint8_t*>(data_), size_, MADV_DONTNEED);
}

void AlignedDeleter::operator()(uint8_t* p) const { std::free(p); }

absl::StatusOr<AlignedBytes> AllocateAligned(size_t size, size_t alignment, bool zero) {
  void* p = nullptr;
  size_t rounded = (size + alignment - 1) / alignment * alignment;
  if (rounded == 0) rounded = alignment;
  if (::posix_memalign(&p, alignment, rounded) != 0 || p == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", size, " bytes"));
  }
  if (zero) std::memset(p, 0, rounded);
  return AlignedBytes(static_cast<uint8_t*>(p));
}

}  // namespace colibri
