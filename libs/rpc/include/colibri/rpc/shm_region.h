// A POSIX shared-memory region shared by a co-located compute node (which creates it) and an
// expert store (which attaches to it by name) so block bytes bypass the gRPC stream.
//
// The creator names the object "/colibri-<pid>-<random>" with owner-only permissions and
// unlinks the name once the peer attached (or when destroyed), so nothing is left in /dev/shm
// after either process exits. Pages are reserved with Commit() (fallocate) before a peer
// writes into them: on a size-limited /dev/shm (64 MiB in a default Docker container) a
// failed reservation is an error for one request instead of a SIGBUS in either process.
// Mapping lifetime: until destruction. Not thread-safe except data()/size() (immutable).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"

namespace colibri::rpc {

class ShmRegion {
 public:
  // Creates and maps a region of `size` bytes (nothing reserved yet).
  static absl::StatusOr<std::unique_ptr<ShmRegion>> Create(size_t size);
  // Maps an existing region by name; FailedPrecondition when it is smaller than `size`.
  static absl::StatusOr<std::unique_ptr<ShmRegion>> Attach(const std::string& name, size_t size);
  ~ShmRegion();
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;

  // Reserves memory for [0, end) (idempotent; grows only). ResourceExhausted when the system
  // cannot back it. Thread-safe.
  absl::Status Commit(uint64_t end);
  // Removes the name; the mapping stays valid.
  void Unlink();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  ShmRegion() = default;
  std::string name_;
  int fd_ = -1;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool owner_ = false;
  bool linked_ = false;
  std::mutex commit_mu_;
  uint64_t committed_ = 0;
};

}  // namespace colibri::rpc
