#include "colibri/store/ingest.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <set>

#include "absl/strings/str_cat.h"
#include "colibri/core/checksum.h"
#include "colibri/core/file_util.h"
#include "colibri/core/status.h"
#include "colibri/model/container.h"
#include "colibri/quant/dtype.h"
#include "colibri/store/disk_set.h"

namespace colibri::store {

namespace fs = std::filesystem;

namespace {

// Blocks committed per catalog batch (after an fdatasync of the stripe files).
constexpr uint64_t kBatchBytes = 64ull << 20;
constexpr size_t kBatchBlocks = 256;

struct WritableStore {
  std::unique_ptr<Catalog> catalog;
  StoreMeta meta;
  std::vector<fs::path> roots;  // by disk index
};

absl::StatusOr<WritableStore> OpenStore(const StoreLocation& loc, bool create) {
  if (loc.disks.empty())
    return absl::InvalidArgumentError("give the store's disks (--disk DIR, repeatable)");
  std::error_code ec;
  for (const auto& d : loc.disks) {
    if (fs::is_directory(d, ec)) continue;
    if (!create) return absl::NotFoundError(absl::StrCat("disk '", d.string(), "' does not exist"));
    fs::create_directories(d, ec);
    if (ec)
      return absl::InternalError(
          absl::StrCat("cannot create disk root '", d.string(), "': ", ec.message()));
  }
  WritableStore st;
  auto found = FindCatalog(loc.disks, loc.catalog);
  const bool exists = found.ok() && fs::exists(*found / "CURRENT", ec);
  if (exists) {
    ASSIGN_OR_RETURN(st.catalog, Catalog::Open(*found, Catalog::Mode::kReadWrite));
    ASSIGN_OR_RETURN(auto meta, st.catalog->GetMeta());
    if (!meta)
      return absl::FailedPreconditionError(
          absl::StrCat("catalog '", found->string(), "' has no store record"));
    st.meta = std::move(*meta);
    ASSIGN_OR_RETURN(st.roots, ResolveDisks(st.meta, loc.disks));
    bool moved = false;
    for (size_t i = 0; i < st.roots.size(); ++i) {
      const std::string p = fs::absolute(st.roots[i]).string();
      moved |= st.meta.disks[i].last_path != p;
      st.meta.disks[i].last_path = p;
    }
    if (moved) RETURN_IF_ERROR(st.catalog->PutMeta(st.meta));
    return st;
  }
  if (!create)
    return found.ok() ? absl::NotFoundError(absl::StrCat("no catalog at '", found->string(), "'"))
                      : found.status();
  // A new store: no disk may belong to another one.
  for (const auto& d : loc.disks) {
    ASSIGN_OR_RETURN(auto id, ReadDiskIdentity(d));
    if (id) {
      return absl::FailedPreconditionError(
          absl::StrCat("disk '", d.string(), "' belongs to store ", id->store_id,
                       " but its catalog was not found: pass --catalog PATH"));
    }
  }
  const fs::path path = loc.catalog.empty() ? loc.disks[0] / kCatalogDirName : loc.catalog;
  ASSIGN_OR_RETURN(st.catalog, Catalog::Open(path, Catalog::Mode::kCreate));
  st.meta.store_id = RandomId();
  const uint32_t n = static_cast<uint32_t>(loc.disks.size());
  for (uint32_t i = 0; i < n; ++i) {
    st.meta.disks.push_back(DiskInfo{i, RandomId(), fs::absolute(loc.disks[i]).string()});
    RETURN_IF_ERROR(
        WriteDiskIdentity(loc.disks[i], DiskIdentity{st.meta.store_id, st.meta.disks[i].id, i, n}));
  }
  RETURN_IF_ERROR(st.catalog->PutMeta(st.meta));
  st.roots = loc.disks;
  return st;
}

absl::Status PwriteFull(int fd, const uint8_t* data, uint64_t size, uint64_t offset,
                        const fs::path& path) {
  uint64_t done = 0;
  while (done < size) {
    ssize_t n = ::pwrite(fd, data + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoStatus(n < 0 ? errno : EIO, "write", path);
    done += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

class StripeFiles {
 public:
  ~StripeFiles() {
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  absl::Status Open(const std::vector<fs::path>& paths) {
    paths_ = paths;
    for (const auto& p : paths) {
      int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0) return ErrnoStatus(errno, "create", p);
      fds_.push_back(fd);
    }
    return absl::OkStatus();
  }
  absl::Status Write(uint32_t disk, const uint8_t* data, uint64_t size, uint64_t offset) {
    return PwriteFull(fds_[disk], data, size, offset, paths_[disk]);
  }
  absl::Status Sync() {
    for (size_t i = 0; i < fds_.size(); ++i) {
      if (::fdatasync(fds_[i]) != 0) return ErrnoStatus(errno, "fdatasync", paths_[i]);
    }
    return absl::OkStatus();
  }

 private:
  std::vector<fs::path> paths_;
  std::vector<int> fds_;
};

}  // namespace

absl::StatusOr<ImportResult> ImportModel(const fs::path& model_dir, const StoreLocation& loc,
                                         const ImportOptions& options) {
  RETURN_IF_ERROR(ValidateStripeSize(options.stripe_size));
  ASSIGN_OR_RETURN(auto container, model::Container::Open(model_dir));
  const model::Manifest& man = container->manifest();
  ImportResult result;
  result.name = options.name.empty() ? man.name : options.name;
  if (result.name.empty()) return absl::InvalidArgumentError("the model has no name: pass --name");
  const int32_t n_layers = static_cast<int32_t>(man.config.n_layers);
  const int32_t n_experts = static_cast<int32_t>(man.config.n_experts);
  const int32_t first = options.first_layer;
  const int32_t last = options.last_layer < 0 ? n_layers - 1 : options.last_layer;
  if (first < 0 || first > last || last >= n_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("layers ", first, "-", last, " are not within the model's 0-", n_layers - 1));
  }
  // A GGUF imported where it lies has no manifest.json: its derived manifest (its parts'
  // identity included, so a changed file is a different source).
  std::string manifest_text;
  if (container->in_place()) {
    manifest_text = model::ManifestToJson(man).dump(1);
  } else {
    ASSIGN_OR_RETURN(manifest_text, ReadFileToString(model_dir / "manifest.json"));
  }
  const uint64_t manifest_checksum = Checksum64(manifest_text.data(), manifest_text.size());

  ASSIGN_OR_RETURN(WritableStore st, OpenStore(loc, /*create=*/true));
  const uint32_t n_disks = static_cast<uint32_t>(st.roots.size());
  std::vector<const model::ExpertBlock*> held;
  std::vector<uint64_t> padded;
  uint64_t total_bytes = 0;
  for (int32_t l = first; l <= last; ++l) {
    for (int32_t e = 0; man.config.IsMoeLayer(l) && e < n_experts; ++e) {
      held.push_back(&man.Expert(l, e));
      padded.push_back(held.back()->padded_size);
      total_bytes += held.back()->size;
    }
  }
  const StripePlan plan = PlanStripes(padded, options.stripe_size, n_disks);
  uint64_t padded_total = 0, resumed_bytes = 0;
  for (uint64_t p : padded) padded_total += p;
  result.blocks_total = held.size();

  ASSIGN_OR_RETURN(auto existing, st.catalog->GetModel(result.name));
  ModelRecord rec;
  if (existing) {
    if (existing->state == ModelState::kReady) {
      return absl::AlreadyExistsError(
          absl::StrCat("model '", result.name,
                       "' is already in the store (remove it first, or import under "
                       "another --name)"));
    }
    if (existing->state == ModelState::kRemoving) {
      return absl::FailedPreconditionError(
          absl::StrCat("model '", result.name, "' is being removed: run remove again to finish"));
    }
    if (existing->source_manifest_checksum != manifest_checksum ||
        existing->stripe_size != options.stripe_size || existing->first_layer != first ||
        existing->last_layer != last || existing->disk_bytes != plan.disk_bytes) {
      return absl::FailedPreconditionError(
          absl::StrCat("an interrupted import of '", result.name, "' from '", existing->source_dir,
                       "' with other parameters (source, stripe size, layers or disks) is in the "
                       "catalog: remove it first"));
    }
    rec = *existing;
  } else {
    rec.name = result.name;
    rec.state = ModelState::kIngesting;
    rec.stripe_size = options.stripe_size;
    rec.n_layers = n_layers;
    rec.n_experts = n_experts;
    rec.first_layer = first;
    rec.last_layer = last;
    rec.blocks_total = static_cast<uint32_t>(held.size());
    rec.total_expert_bytes = total_bytes;
    rec.disk_bytes = plan.disk_bytes;
    rec.source_dir = fs::absolute(model_dir).string();
    rec.source_manifest_checksum = manifest_checksum;
    rec.manifest_json = manifest_text;
    RETURN_IF_ERROR(st.catalog->PutModel(rec));
  }

  std::vector<fs::path> paths;
  for (const auto& root : st.roots) {
    paths.push_back(StripeFilePath(root, result.name));
    std::error_code ec;
    fs::create_directories(paths.back().parent_path(), ec);
    if (ec)
      return absl::InternalError(
          absl::StrCat("create '", paths.back().parent_path().string(), "': ", ec.message()));
  }
  StripeFiles files;
  RETURN_IF_ERROR(files.Open(paths));
  std::set<uint64_t> committed;  // ExpertId::Key of the blocks already in the catalog
  {
    ASSIGN_OR_RETURN(auto done_blocks, st.catalog->GetBlocks(result.name));
    for (const auto& b : done_blocks) committed.insert(b.id.Key());
  }
  const size_t batch_blocks = options.stop_after_blocks >= 0 ? 1 : kBatchBlocks;
  std::vector<BlockRecord> batch;
  uint64_t batch_bytes = 0;
  auto commit = [&]() -> absl::Status {
    if (batch.empty()) return absl::OkStatus();
    RETURN_IF_ERROR(files.Sync());
    RETURN_IF_ERROR(st.catalog->PutBlocks(result.name, batch));
    batch.clear();
    batch_bytes = 0;
    if (options.progress) options.progress(result.bytes_written + resumed_bytes, padded_total);
    return absl::OkStatus();
  };
  for (size_t j = 0; j < held.size(); ++j) {
    const model::ExpertBlock& b = *held[j];
    if (committed.count(b.id.Key())) {
      result.blocks_resumed++;
      resumed_bytes += b.padded_size;
      continue;
    }
    if (options.stop_after_blocks >= 0 &&
        result.blocks_written >= static_cast<uint64_t>(options.stop_after_blocks)) {
      RETURN_IF_ERROR(commit());
      return absl::AbortedError(absl::StrCat("import of '", result.name, "' stopped after ",
                                             result.blocks_written, " blocks (test hook)"));
    }
    ASSIGN_OR_RETURN(AlignedBytes bytes,
                     container->ReadExpertBlock(b.id));  // verifies the checksum
    BlockRecord r = BlockRecordFromManifest(b);
    r.extents = plan.blocks[j];
    uint64_t at = 0;
    for (Extent& e : r.extents) {
      e.checksum = Checksum64(bytes.get() + at, e.length);
      e.has_checksum = true;
      RETURN_IF_ERROR(files.Write(e.disk, bytes.get() + at, e.length, e.offset));
      at += e.length;
    }
    result.bytes_written += b.padded_size;
    result.blocks_written++;
    batch.push_back(std::move(r));
    batch_bytes += b.padded_size;
    if (batch_bytes >= kBatchBytes || batch.size() >= batch_blocks) RETURN_IF_ERROR(commit());
  }
  RETURN_IF_ERROR(commit());
  RETURN_IF_ERROR(files.Sync());
  for (const auto& p : paths) RETURN_IF_ERROR(SyncDirectory(p.parent_path()));
  rec.state = ModelState::kReady;
  RETURN_IF_ERROR(st.catalog->PutModel(rec));  // the commit point
  return result;
}

absl::StatusOr<std::vector<ListedModel>> ListModels(const StoreLocation& loc) {
  if (loc.disks.empty() && loc.catalog.empty())
    return absl::InvalidArgumentError("give the store's disks (--disk)");
  ASSIGN_OR_RETURN(fs::path path, FindCatalog(loc.disks, loc.catalog));
  ASSIGN_OR_RETURN(auto catalog, Catalog::Open(path, Catalog::Mode::kReadOnly));
  ASSIGN_OR_RETURN(auto records, catalog->ListModels());
  std::vector<ListedModel> out;
  for (auto& r : records) {
    ASSIGN_OR_RETURN(auto blocks, catalog->GetBlocks(r.name));
    out.push_back(ListedModel{std::move(r), blocks.size()});
  }
  return out;
}

absl::Status RemoveModel(const StoreLocation& loc, const std::string& name) {
  ASSIGN_OR_RETURN(WritableStore st, OpenStore(loc, /*create=*/false));
  ASSIGN_OR_RETURN(auto rec, st.catalog->GetModel(name));
  if (!rec) return absl::NotFoundError(absl::StrCat("model '", name, "' is not in the store"));
  rec->state = ModelState::kRemoving;
  RETURN_IF_ERROR(st.catalog->PutModel(*rec));
  for (const auto& root : st.roots) {
    const fs::path dir = StripeFilePath(root, name).parent_path();
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (ec) return absl::InternalError(absl::StrCat("remove '", dir.string(), "': ", ec.message()));
    if (fs::exists(dir.parent_path(), ec)) RETURN_IF_ERROR(SyncDirectory(dir.parent_path()));
  }
  return st.catalog->DeleteModel(name);
}

}  // namespace colibri::store
