// BlockStore: the serving view of an expert store. It opens the striped disks (through the
// RocksDB catalog, read-only) and/or plain model directories (or containers a process has open
// already: its own model, a GGUF in place included), cross-checks the catalog against the
// files, and reads verified blocks through the I/O engine.
//
// Start-up checks (Open fails with an error naming the disk, file or model): every disk of the
// store given and carrying the store's identity; for every ready model, each disk's stripe file
// present and as long as the catalog says, block records complete and matching the model's
// manifest (sizes, checksums), every extent inside its file. Models still ingesting or being
// removed are skipped with a warning.
//
// Verification: a striped block is verified stripe by stripe, each unit's XXH3-64 against the
// catalog as the unit lands (units were checksummed at ingest from bytes verified against the
// block checksum, so all units matching is the block matching); a block of a plain model
// directory by its container (the manifest checksum; a GGUF in place records it the first time). A mismatch is DataLoss naming the expert, the
// stripe, the disk and the file offset, is counted per disk, and the bytes are never reported
// as good. Thread-safe; models and records are immutable after Open.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/model/container.h"
#include "colibri/model/manifest.h"
#include "colibri/store/catalog.h"
#include "colibri/store/io_engine.h"
#include "colibri/store/read_cache.h"

namespace colibri::store {

struct BlockStoreOptions {
  std::vector<std::filesystem::path> disks;       // striped store roots (any order)
  std::filesystem::path catalog;                  // empty: found on the disks
  std::vector<std::filesystem::path> model_dirs;  // plain model directories, served as they are
  // Open containers served as they are (not owned; each must outlive the store): a process's
  // own model, a GGUF in place included. One engine disk each, after the model directories.
  std::vector<const model::Container*> containers;
  IoEngineOptions io;
  uint64_t read_cache_bytes = 0;  // 0: no RAM read cache
};

// One model the store serves (a full copy or a range of layers).
class StoredModel {
 public:
  const std::string& name() const { return name_; }
  const model::Manifest& manifest() const { return manifest_; }
  int32_t n_layers() const { return static_cast<int32_t>(manifest_.config.n_layers); }
  int32_t n_experts() const { return static_cast<int32_t>(manifest_.config.n_experts); }
  int32_t first_layer() const { return first_layer_; }
  int32_t last_layer() const { return last_layer_; }
  bool full_copy() const { return first_layer_ == 0 && last_layer_ == n_layers() - 1; }
  uint64_t total_expert_bytes() const { return total_expert_bytes_; }
  uint64_t stripe_size() const { return stripe_size_; }  // 0: a plain model directory
  const std::string& origin() const { return origin_; }  // for logs
  // The block of (layer, expert), or nullptr when out of range or not held.
  const BlockRecord* Find(expert_source::ExpertId id) const;
  bool InRange(expert_source::ExpertId id) const {
    return id.layer >= 0 && id.layer < n_layers() && id.expert >= 0 && id.expert < n_experts();
  }
  // Requires InRange(id): the block's slot, layer-major (dense layers leave holes).
  size_t Index(expert_source::ExpertId id) const {
    return static_cast<size_t>(id.layer) * static_cast<size_t>(n_experts()) +
           static_cast<size_t>(id.expert);
  }

 private:
  friend class BlockStore;
  std::string name_;
  model::Manifest manifest_;
  int32_t first_layer_ = 0;
  int32_t last_layer_ = -1;
  uint64_t total_expert_bytes_ = 0;
  uint64_t stripe_size_ = 0;
  std::string origin_;
  uint32_t index_ = 0;
  std::vector<BlockRecord> blocks_;  // by layer * n_experts + expert; padded_size 0: not held
  std::vector<uint32_t> files_;      // striped: engine file by disk
  // A plain model: its container (verifies blocks) and, by block index, one entry per extent:
  // the engine file it is read from and the bytes of it that file must hold (a GGUF's last
  // tensor may end before its 4 KiB-aligned extent does).
  struct PlainExtent {
    uint32_t file = 0;
    uint64_t needed = 0;
  };
  const model::Container* container_ = nullptr;
  std::vector<std::vector<PlainExtent>> plain_;
};

// True for the DataLoss a checksum mismatch produces (as opposed to an I/O error, which the
// I/O layer may also report as DataLoss, e.g. EIO).
bool IsChecksumMismatch(const absl::Status& status);

// A block read in progress, for BlockStore::Cancel and Promote: the engine reads (one per run
// of stripe units on a disk) it is made of. Opaque to callers.
struct BlockRead {
  std::mutex mu;
  std::vector<IoEngine::Ticket> tickets;  // mu
  uint64_t key = 0;                       // read-cache key of a shared read
  bool shared = false;                    // a ReadShared read other callers may wait for too
  std::vector<std::function<void(absl::StatusOr<SharedBlock>)>> waiters;  // store's inflight_mu_
};

class BlockStore {
 public:
  using Priority = expert_source::Priority;
  using Done = std::function<void(absl::Status)>;
  using SharedDone = std::function<void(absl::StatusOr<SharedBlock>)>;
  using ReadHandle = std::shared_ptr<BlockRead>;  // null: nothing to cancel (a cache hit)

  static absl::StatusOr<std::unique_ptr<BlockStore>> Open(const BlockStoreOptions& options);
  ~BlockStore();

  const std::vector<std::unique_ptr<StoredModel>>& models() const { return models_; }
  const StoredModel* FindModel(std::string_view name) const;
  // The block, or NotFound naming the model and the expert.
  absl::StatusOr<const BlockRecord*> FindBlock(std::string_view model, expert_source::ExpertId id,
                                               const StoredModel** found = nullptr) const;

  // Reads the block into `dst` (>= padded_size bytes, 4 KiB aligned) and verifies it. `done`
  // runs once: on an engine thread, or inline before ReadInto returns on a read-cache hit.
  ReadHandle ReadInto(const StoredModel& model, const BlockRecord& block, uint8_t* dst,
                      Priority priority, Done done);
  // Reads the block into a shared buffer through the read cache (when there is one);
  // concurrent reads of one block are coalesced. `done` as for ReadInto.
  ReadHandle ReadShared(const StoredModel& model, const BlockRecord& block, Priority priority,
                        SharedDone done);
  // Reads bytes [begin, end) of the block (begin < end <= size) for a client assembling the
  // block from several holders. The whole block when the read cache holds it; else only the
  // stripe units covering the range, each verified, or in a plain model directory the 4 KiB
  // pages covering it (unverified here: the block checksum needs every byte, and the client
  // checks the assembled block). The buffer's `offset` is the block offset of its first byte;
  // part reads are not cached nor coalesced. `done` as for ReadInto.
  ReadHandle ReadRange(const StoredModel& model, const BlockRecord& block, uint64_t begin,
                       uint64_t end, Priority priority, SharedDone done);
  // The block bytes [first, second) a ReadRange of [begin, end) reads when the read cache does
  // not hold the block (first >= second: no extent covers the range).
  static std::pair<uint64_t, uint64_t> PartWindow(const BlockRecord& block, uint64_t begin,
                                                  uint64_t end);

  // Advisory. Cancels the parts of the read still queued at the disks (they never reach the
  // device); `done` then gets Cancelled once the parts already submitted have landed. A shared
  // read that another caller waits for too is left alone.
  void Cancel(const ReadHandle& read);
  // Advisory. Moves the parts of the read still queued at the disks as prefetch ahead of every
  // queued prefetch read.
  void Promote(const ReadHandle& read);

  IoEngine& io() { return *io_; }
  const IoEngine& io() const { return *io_; }
  // Engine disks: the striped disks by index, then one per plain model directory, then one per
  // container.
  uint32_t disk_count() const { return io_->disk_count(); }
  const std::string& disk_name(uint32_t disk) const { return io_->disk_name(disk); }
  uint64_t checksum_failures(uint32_t disk) const { return checksum_failures_[disk].load(); }
  std::optional<ReadCacheStats> read_cache_stats() const;
  // Models found in the catalog but not served (ingesting, removing), with the reason.
  const std::vector<std::string>& skipped() const { return skipped_; }

 private:
  BlockStore() = default;
  absl::Status AddStriped(const Catalog& catalog, const std::vector<std::filesystem::path>& roots);
  absl::Status AddModelDir(const std::filesystem::path& dir, uint32_t disk);
  absl::Status AddContainer(const model::Container& container, uint32_t disk);
  // Starts the engine reads of the block, recording their tickets in `read`.
  // Only bytes [window_begin, window_end) of the padded block, landing at dst (the whole
  // block: 0, padded_size); stripe units fully inside the window are verified, and the block
  // checksum of a plain model directory when the window is the whole block.
  void ReadRaw(const StoredModel& model, const BlockRecord& block, uint8_t* dst, Priority priority,
               BlockRead* read, Done done, uint64_t window_begin, uint64_t window_end);
  static uint64_t CacheKey(const StoredModel& model, const BlockRecord& block);

  std::unique_ptr<IoEngine> io_;
  std::vector<std::unique_ptr<model::Container>> containers_;  // the model directories'
  std::vector<std::unique_ptr<StoredModel>> models_;
  std::vector<std::string> skipped_;
  std::unique_ptr<std::atomic<uint64_t>[]> checksum_failures_;
  std::unique_ptr<ReadCache> cache_;
  std::mutex inflight_mu_;
  std::unordered_map<uint64_t, ReadHandle> inflight_;  // coalesced shared reads by cache key
};

}  // namespace colibri::store
