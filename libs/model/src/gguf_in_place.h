// A GGUF served where it lies (Container::Open on a .gguf): the manifest derived from its header
// by the importer's own walk (tensor_sink.h), dense weights converted into memory on load, expert
// blocks gathered from their slices of the fused *_exps tensors, and each block's checksum
// recorded on its first read in a sidecar beside the file (or in the cache directory), keyed by
// the identity of every part so a changed file is never checked against stale sums.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/core/file_util.h"
#include "colibri/model/gguf_reader.h"
#include "colibri/model/manifest.h"
#include "colibri/model/quant_plan.h"
#include "nlohmann/json.hpp"

namespace colibri::model {

class GgufInPlace {
 public:
  // `first`: a single-file GGUF or the first part of a split set. Fills `manifest`.
  static absl::StatusOr<std::unique_ptr<GgufInPlace>> Open(const std::filesystem::path& first,
                                                           Manifest* manifest);
  ~GgufInPlace();

  const std::filesystem::path& first_part() const { return first_; }
  // The sidecar directory (routing heat, tune profile, recorded checksums).
  const std::filesystem::path& state_dir() const { return state_dir_; }

  // Converts every dense tensor into `buffer` (manifest.dense_size bytes) at its planned offset,
  // and checks the whole against the checksum recorded at the first load (recording it then).
  absl::Status LoadDense(const Manifest& manifest, uint8_t* buffer);
  // One extra (NextN) tensor, converted as the importer would.
  absl::StatusOr<AlignedBytes> ReadExtra(const TensorEntry& entry) const;
  // A block read whose checksum the manifest does not know yet: compares `got` with the sum
  // recorded earlier in this run or records it (persisted by Flush, at most every few seconds
  // and at exit). DataLoss naming the block when it differs.
  absl::Status Record(const Manifest& manifest, const ExpertBlock& block, uint64_t got,
                      std::string_view where);
  absl::Status Flush();

 private:
  GgufInPlace(GgufFile file, QuantPlan plan) : file_(std::move(file)), plan_(std::move(plan)) {}
  void LoadRecorded(Manifest* manifest);
  absl::Status FlushLocked();

  GgufFile file_;
  QuantPlan plan_;
  ModelConfig config_;
  std::filesystem::path first_, state_dir_;
  nlohmann::json identity_;

  std::mutex mu_;
  std::vector<uint64_t> recorded_;  // by ExpertIndex; valid where has_ is set
  std::vector<uint8_t> has_;
  std::optional<uint64_t> dense_checksum_;
  size_t unsaved_ = 0;
  std::chrono::steady_clock::time_point last_flush_ = std::chrono::steady_clock::now();
  bool warned_unsaved_ = false;
};

}  // namespace colibri::model
