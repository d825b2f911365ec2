// File helpers: whole-file reads, crash-safe writes, read-only mappings and aligned buffers.
// All functions return errors naming the path and the errno text; none throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace colibri {

absl::StatusOr<std::string> ReadFileToString(const std::filesystem::path& path);

// Writes `data` to `path` atomically: a temp file beside it ("<path>.tmp", created with `mode`
// less the umask), fsync, rename, fsync of the directory. A crash leaves either the old file or
// the new one, never a partial one; a failed write (ENOSPC, EIO, ...) removes its temp file.
absl::Status WriteFileAtomic(const std::filesystem::path& path, std::string_view data,
                             unsigned mode = 0644);

// fsyncs a directory so that renames inside it are durable.
absl::Status SyncDirectory(const std::filesystem::path& dir);

// Errno-based status with the operation and path in the message.
absl::Status ErrnoStatus(int err, std::string_view op, const std::filesystem::path& path);

// A read-only mapping of a whole file. Movable; unmaps on destruction.
class MappedFile {
 public:
  static absl::StatusOr<MappedFile> Open(const std::filesystem::path& path);
  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  ~MappedFile();

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // Drops the mapping's resident pages from this process (MADV_DONTNEED); the file's pages stay
  // in the page cache and fault back in on the next access.
  void ReleasePages() const;

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Heap memory aligned for O_DIRECT and SIMD (default 4 KiB). Zero-initialised unless `zero` is
// false (for buffers a read overwrites whole: skipping the memset saves a pass over memory).
struct AlignedDeleter {
  void operator()(uint8_t* p) const;
};
using AlignedBytes = std::unique_ptr<uint8_t[], AlignedDeleter>;
absl::StatusOr<AlignedBytes> AllocateAligned(size_t size, size_t alignment = 4096,
                                             bool zero = true);

}  // namespace colibri
