// A store's disks: each root holds colibri-disk.json naming the store and the disk's index, so
// the disks may be given in any order and a missing or foreign disk is named clearly. The
// catalog lives in <root of disk 0>/colibri-catalog unless an explicit path is given.
// Functions only; thread-compatible.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/store/catalog.h"

namespace colibri::store {

struct DiskIdentity {
  std::string store_id;
  std::string disk_id;
  uint32_t index = 0;
  uint32_t n_disks = 0;
};

// nullopt when the root has no identity file.
absl::StatusOr<std::optional<DiskIdentity>> ReadDiskIdentity(const std::filesystem::path& root);
absl::Status WriteDiskIdentity(const std::filesystem::path& root, const DiskIdentity& identity);

// `explicit_path` when set; else the colibri-catalog directory found on the roots (NotFound
// when none holds one, naming the roots).
absl::StatusOr<std::filesystem::path> FindCatalog(std::span<const std::filesystem::path> roots,
                                                  const std::filesystem::path& explicit_path);

// The roots ordered by the catalog's disk indices. Errors name the disk: one the catalog
// expects that was not given (or lost its identity file), one of another store, a duplicate.
absl::StatusOr<std::vector<std::filesystem::path>> ResolveDisks(
    const StoreMeta& meta, std::span<const std::filesystem::path> roots);

// 32 random hex digits.
std::string RandomId();

}  // namespace colibri::store
