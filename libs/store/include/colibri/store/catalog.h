// The store's catalog: a RocksDB database mapping (model, layer, expert) to the block's stripe
// locations, sizes, quant types and checksums, plus the store's identity and its disks.
//
// Keys
//   "meta"                                   StoreMeta (JSON)
//   "model/" + name                          ModelRecord (JSON)
//   "block/" + name + '\0' + be32(layer) + be32(expert)   BlockRecord (binary, versioned)
// Every write is a synced WriteBatch, so a crash leaves whole records only. A model is served
// only in state kReady; the switch to kReady is the commit point of an ingest.
//
// Opening: one read-write owner at a time (RocksDB's LOCK file); a serving store opens the
// catalog read-only, so `colibri-expert-store import` can run beside it. Thread-safe (RocksDB
// is); records are values, no references into the database are handed out.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/expert_source/expert_id.h"
#include "colibri/model/manifest.h"
#include "colibri/store/layout.h"

namespace rocksdb {
class DB;
}

namespace colibri::store {

inline constexpr const char* kCatalogDirName = "colibri-catalog";

struct DiskInfo {
  uint32_t index = 0;
  std::string id;         // random, also in the disk's colibri-disk.json
  std::string last_path;  // where the disk was mounted when last written (for messages)
};

struct StoreMeta {
  int version = 1;
  std::string store_id;
  std::vector<DiskInfo> disks;  // by index
};

enum class ModelState { kIngesting, kReady, kRemoving };
const char* ModelStateName(ModelState state);

struct ModelRecord {
  std::string name;
  ModelState state = ModelState::kIngesting;
  uint64_t stripe_size = kDefaultStripeSize;
  int32_t n_layers = 0;
  int32_t n_experts = 0;
  int32_t first_layer = 0;  // the store holds layers [first_layer, last_layer]
  int32_t last_layer = -1;
  uint32_t blocks_total = 0;              // blocks this store holds of the model
  uint64_t total_expert_bytes = 0;        // sum of their sizes
  std::vector<uint64_t> disk_bytes;       // each disk's stripes.bin size
  std::string source_dir;                 // model directory it was ingested from
  uint64_t source_manifest_checksum = 0;  // XXH3-64 of that manifest.json: resumes must match
  std::string manifest_json;              // the model's manifest, so the disks alone describe it

  bool full_copy() const { return first_layer == 0 && last_layer == n_layers - 1; }
  bool HoldsLayer(int64_t layer) const { return layer >= first_layer && layer <= last_layer; }
};

struct BlockRecord {
  expert_source::ExpertId id;
  uint64_t size = 0;               // checksummed bytes
  uint64_t padded_size = 0;        // multiple of 4 KiB: what a read fetches
  uint64_t checksum = 0;           // XXH3-64 of `size` bytes (as in the manifest)
  std::vector<std::string> quant;  // dtype of each part (gate, up, down), e.g. "q4_k"
  std::vector<Extent> extents;     // stripe units in block order, each with its checksum

  bool operator==(const BlockRecord&) const = default;
};

// A block's record from its manifest entry (id, sizes, checksum, part types); no extents.
BlockRecord BlockRecordFromManifest(const model::ExpertBlock& block);

std::string EncodeBlockRecord(const BlockRecord& record);
absl::StatusOr<BlockRecord> DecodeBlockRecord(std::string_view bytes);

class Catalog {
 public:
  enum class Mode { kReadOnly, kReadWrite, kCreate };
  static absl::StatusOr<std::unique_ptr<Catalog>> Open(const std::filesystem::path& dir, Mode mode);
  ~Catalog();

  const std::filesystem::path& path() const { return path_; }

  absl::StatusOr<std::optional<StoreMeta>> GetMeta() const;
  absl::Status PutMeta(const StoreMeta& meta);

  absl::StatusOr<std::vector<ModelRecord>> ListModels() const;
  absl::StatusOr<std::optional<ModelRecord>> GetModel(std::string_view name) const;
  absl::Status PutModel(const ModelRecord& record);

  // Writes the blocks (and, when given, the model record) in one synced batch.
  absl::Status PutBlocks(std::string_view model, std::span<const BlockRecord> blocks,
                         const ModelRecord* record = nullptr);
  // Every block record of the model, in (layer, expert) order.
  absl::StatusOr<std::vector<BlockRecord>> GetBlocks(std::string_view model) const;
  // Deletes the model record and all its blocks in one batch.
  absl::Status DeleteModel(std::string_view model);

 private:
  Catalog() = default;
  absl::StatusOr<std::optional<std::string>> Get(const std::string& key) const;

  std::filesystem::path path_;
  bool read_only_ = true;
  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace colibri::store
