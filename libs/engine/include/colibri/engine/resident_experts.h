// ResidentExperts: every expert block of a model held in host RAM, optionally re-quantized at
// load, as an ExpertSource. The drafters of speculative decoding run on it so that drafting
// never touches the disk: the self drafter on a low-bit copy of the target's own experts
// (--draft-experts q2_k: made at load from the target's blocks, with the target's dense weights,
// Model::LoadDrafter), a separate draft model (--draft-model) on its blocks as they are.
//
// The blocks are read once from a source (the model directory or the expert stores, below any
// cache: checksums verified there) and immutable afterwards;
// manifest() describes them as held here (parts' types, offsets and sizes, the blocks' sizes and
// checksums), which is what a Model over this source must interpret them with.
// Thread-safe (read-only after Load).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/expert_source/expert_source.h"
#include "colibri/model/container.h"
#include "colibri/quant/dtype.h"

namespace colibri::engine {

class ResidentExperts final : public expert_source::ExpertSource {
 public:
  // Reads every expert block `manifest` lists from `from` (host blocks) with `threads` threads;
  // with `dtype`, re-quantizes each gate, up and down matrix to it (biases stay f32).
  // InvalidArgument when `dtype` has no quantizer or a matrix's rows are not a whole number of
  // its blocks; the source's errors as they are.
  static absl::StatusOr<std::unique_ptr<ResidentExperts>> Load(const model::Manifest& manifest,
                                                               expert_source::ExpertSource* from,
                                                               std::optional<quant::DType> dtype,
                                                               int threads = 4);

  // Blocks already in memory: blocks[i] holds manifest.experts[i] as that entry describes it
  // (an MTP layer's experts, cut from its stacked tensors by Model::LoadMtp).
  static std::unique_ptr<ResidentExperts> Adopt(model::Manifest manifest,
                                                std::vector<expert_source::Lease> blocks);

  const model::Manifest& manifest() const { return manifest_; }
  uint64_t bytes() const { return bytes_; }  // of all blocks held

  absl::StatusOr<expert_source::Lease> Fetch(expert_source::ExpertId id,
                                             expert_source::Priority priority) override;
  uint64_t BlockSize(expert_source::ExpertId id) const override;

 private:
  ResidentExperts() = default;
  model::Manifest manifest_;
  std::vector<expert_source::Lease> blocks_;  // by Manifest::ExpertIndex
  uint64_t bytes_ = 0;
};

}  // namespace colibri::engine
