// Ingest: copies the expert blocks of a converted model directory onto a store's disks,
// striped (see layout.h), and records them in the catalog. Also lists and removes models.
//
// Atomic: the model is recorded in state kIngesting first and switches to kReady (the commit
// point) only after every stripe is written and fsync'ed; a serving store never sees a half
// model. Resumable: block records are committed in batches after their bytes are fsync'ed; an
// interrupted import run again with the same source and parameters continues after the last
// committed batch (the stripe plan is deterministic, so offsets are the same). The first import
// onto a set of disks creates the store: identity files on every disk and the catalog on disk 0.
// Functions hold the catalog read-write for their duration (one at a time; a serving store's
// read-only catalog does not block them). Not thread-safe against each other.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/store/catalog.h"
#include "colibri/store/layout.h"

namespace colibri::store {

struct StoreLocation {
  std::vector<std::filesystem::path> disks;  // the store's disk roots, any order
  std::filesystem::path catalog;             // empty: found on the disks (created on disk 0)
};

struct ImportOptions {
  uint64_t stripe_size = kDefaultStripeSize;
  std::string name;         // the model's name in the store; empty: the manifest's name
  int32_t first_layer = 0;  // hold only layers [first_layer, last_layer] (a partial copy)
  int32_t last_layer = -1;  // -1: the last layer
  // Called after each committed batch with (bytes done, bytes total) of the padded blocks
  // (blocks an interrupted import already committed count as done).
  std::function<void(uint64_t, uint64_t)> progress;
  // Test hook: stop (as if killed) after committing this many blocks; -1: never.
  int64_t stop_after_blocks = -1;
};

struct ImportResult {
  std::string name;
  uint64_t blocks_total = 0;
  uint64_t blocks_written = 0;  // by this run
  uint64_t blocks_resumed = 0;  // already committed by an earlier, interrupted run
  uint64_t bytes_written = 0;
};

absl::StatusOr<ImportResult> ImportModel(const std::filesystem::path& model_dir,
                                         const StoreLocation& store, const ImportOptions& options);

struct ListedModel {
  ModelRecord record;
  uint64_t blocks_committed = 0;  // of record.blocks_total
};
absl::StatusOr<std::vector<ListedModel>> ListModels(const StoreLocation& store);

// Removes a model (any state): marks it kRemoving, deletes its stripe files, then its records.
absl::Status RemoveModel(const StoreLocation& store, const std::string& name);

}  // namespace colibri::store
