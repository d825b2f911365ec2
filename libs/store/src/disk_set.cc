#include "colibri/store/disk_set.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "colibri/core/file_util.h"
#include "colibri/core/status.h"
#include "nlohmann/json.hpp"

namespace colibri::store {

namespace fs = std::filesystem;

std::string RandomId() {
  std::random_device rd;
  static const char* kHex = "0123456789abcdef";
  std::string id;
  for (int i = 0; i < 32; ++i) id.push_back(kHex[rd() & 15]);
  return id;
}

absl::StatusOr<std::optional<DiskIdentity>> ReadDiskIdentity(const fs::path& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return absl::NotFoundError(
        absl::StrCat("disk '", root.string(), "' does not exist or is not a directory"));
  }
  const fs::path path = root / kDiskIdentityFile;
  if (!fs::exists(path, ec)) return std::optional<DiskIdentity>();
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  auto j = nlohmann::json::parse(text, nullptr, false);
  DiskIdentity id;
  if (j.is_discarded() || !j.is_object() || !j.contains("store_id") || !j.contains("disk_id") ||
      !j.contains("index") || !j.contains("n_disks") || !j["index"].is_number_unsigned() ||
      !j["n_disks"].is_number_unsigned() || !j["store_id"].is_string() ||
      !j["disk_id"].is_string()) {
    return absl::DataLossError(
        absl::StrCat("'", path.string(), "' is not a valid disk identity file"));
  }
  id.store_id = j["store_id"].get<std::string>();
  id.disk_id = j["disk_id"].get<std::string>();
  id.index = j["index"].get<uint32_t>();
  id.n_disks = j["n_disks"].get<uint32_t>();
  return std::optional<DiskIdentity>(id);
}

absl::Status WriteDiskIdentity(const fs::path& root, const DiskIdentity& id) {
  nlohmann::json j = {{"store_id", id.store_id},
                      {"disk_id", id.disk_id},
                      {"index", id.index},
                      {"n_disks", id.n_disks}};
  return WriteFileAtomic(root / kDiskIdentityFile, j.dump(1) + "\n");
}

absl::StatusOr<fs::path> FindCatalog(std::span<const fs::path> roots,
                                     const fs::path& explicit_path) {
  if (!explicit_path.empty()) return explicit_path;
  std::error_code ec;
  for (const auto& r : roots) {
    if (fs::exists(r / kCatalogDirName / "CURRENT", ec)) return r / kCatalogDirName;
  }
  std::vector<std::string> names;
  for (const auto& r : roots) names.push_back(r.string());
  return absl::NotFoundError(absl::StrCat("no catalog (", kCatalogDirName, "/) on the disks ",
                                          absl::StrJoin(names, ", "),
                                          ": import a model first, or pass --catalog PATH"));
}

absl::StatusOr<std::vector<fs::path>> ResolveDisks(const StoreMeta& meta,
                                                   std::span<const fs::path> roots) {
  std::vector<fs::path> ordered(meta.disks.size());
  for (const auto& root : roots) {
    ASSIGN_OR_RETURN(auto id, ReadDiskIdentity(root));
    if (!id) {
      return absl::FailedPreconditionError(absl::StrCat("disk '", root.string(),
                                                        "' is not a disk of store ", meta.store_id,
                                                        ": it has no ", kDiskIdentityFile));
    }
    if (id->store_id != meta.store_id) {
      return absl::FailedPreconditionError(
          absl::StrCat("disk '", root.string(), "' belongs to store ", id->store_id,
                       ", not to store ", meta.store_id, " of this catalog"));
    }
    if (id->index >= meta.disks.size() || meta.disks[id->index].id != id->disk_id) {
      return absl::FailedPreconditionError(absl::StrCat(
          "disk '", root.string(), "' (index ", id->index, ") does not match the catalog's disks"));
    }
    if (!ordered[id->index].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("disk ", id->index, " given twice: '",
                                                     ordered[id->index].string(), "' and '",
                                                     root.string(), "'"));
    }
    ordered[id->index] = root;
  }
  for (size_t i = 0; i < ordered.size(); ++i) {
    if (ordered[i].empty()) {
      return absl::NotFoundError(absl::StrCat(
          "disk ", i, " of ", meta.disks.size(), " of store ", meta.store_id, " (last seen at '",
          meta.disks[i].last_path, "') is missing: pass --disk for it"));
    }
  }
  return ordered;
}

}  // namespace colibri::store
