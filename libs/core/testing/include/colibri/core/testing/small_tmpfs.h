// A small tmpfs mounted for one test, so that writes fail with a real ENOSPC once it is full.
// Mounting needs CAP_SYS_ADMIN (root in a container that allows mount); without it Mount()
// returns FailedPrecondition with the reason, and a test skips with that message. Unmounted
// (lazily) and removed on destruction. Not thread-safe; one per test.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>

#include "absl/status/statusor.h"

namespace colibri::testing {

class SmallTmpfs {
 public:
  // A fresh directory under the system temp directory with a tmpfs of `bytes` mounted on it.
  static absl::StatusOr<std::unique_ptr<SmallTmpfs>> Mount(uint64_t bytes);
  ~SmallTmpfs();
  SmallTmpfs(const SmallTmpfs&) = delete;
  SmallTmpfs& operator=(const SmallTmpfs&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  explicit SmallTmpfs(std::filesystem::path path) : path_(std::move(path)) {}
  std::filesystem::path path_;
};

}  // namespace colibri::testing
