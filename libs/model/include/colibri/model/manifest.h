// The colibri model container, version 1: a self-describing directory
//
//   <model_dir>/manifest.json   this manifest (written last; its presence marks a whole model)
//   <model_dir>/dense.bin       every non-expert tensor, each 64-byte aligned
//   <model_dir>/experts.bin     one block per (layer, expert): gate, up, down adjacent, each
//                               block 4 KiB aligned and padded to 4 KiB (O_DIRECT-readable)
//   <model_dir>/experts/L{layer}_E{expert}.bin   instead of experts.bin with --split-experts
//   <model_dir>/extra.bin       kept tensors the engine never loads (the NextN/MTP layer), each
//                               64-byte aligned; only when the model has some
//   <model_dir>/tokenizer.json, tokenizer_config.json   copied from the source, when present
//
// Every dense tensor and every expert block carries an XXH3-64 checksum of its bytes.
// Tensor shapes are outermost-first; a weight matrix is [out, in] with rows of `in` elements
// stored contiguously in its quant format (the GGML convention, so GGUF blocks copy unchanged).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/expert_source/expert_id.h"
#include "colibri/model/model_config.h"
#include "colibri/quant/dtype.h"
#include "nlohmann/json.hpp"

namespace colibri::model {

inline constexpr int kContainerVersion = 1;
inline constexpr uint64_t kExpertBlockAlignment = 4096;
inline constexpr uint64_t kDenseAlignment = 64;

struct TensorEntry {
  std::string name;  // canonical: token_embd, output_norm, output, blk.N.attn_q, ...
  quant::DType dtype = quant::DType::kF32;
  std::vector<int64_t> shape;  // outermost first
  uint64_t offset = 0;         // in dense.bin (dense) or inside the block (expert parts)
  uint64_t size = 0;           // bytes
  uint64_t checksum = 0;       // dense tensors only

  int64_t numel() const;
  int64_t rows() const { return shape.size() == 2 ? shape[0] : 1; }
  int64_t cols() const { return shape.empty() ? 0 : shape.back(); }
};

// One read that lands part of a block: `length` bytes at `offset` of `file` (both multiples of
// 4 KiB, O_DIRECT-readable) into the block's bytes at `at`. Only the first `needed` bytes must
// exist: a range may run past the end of its file (a GGUF's last tensor), and a read that stops
// there is not short.
struct FileRange {
  std::string file;  // relative to the model directory
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t at = 0;
  uint64_t needed = 0;
};

struct ExpertBlock {
  expert_source::ExpertId id;  // (layer, expert): the same type the sources, stores and router use
  std::string file;            // relative to the model directory
  uint64_t offset = 0;         // 4 KiB aligned
  uint64_t size = 0;           // bytes covered by the checksum
  uint64_t padded_size = 0;    // size rounded up to 4 KiB: what an O_DIRECT read fetches
  uint64_t checksum = 0;
  std::vector<TensorEntry> parts;  // gate [ffn, hidden], up [ffn, hidden], down [hidden, ffn]
  // A GGUF served in place (gguf_in_place.h): the block is gathered from the 4 KiB-aligned
  // ranges that enclose its slices of the fused expert tensors, each part's offset pointing at
  // its slice inside them; its checksum covers the parts' bytes only (PartsChecksum) and is
  // known only once recorded (checksum_known false until then). Empty for a container's block,
  // which is the one range (file, offset, padded_size) at 0.
  std::vector<FileRange> ranges;
  bool checksum_known = true;

  const TensorEntry* Part(std::string_view name) const;
  // Calls f(const FileRange&) for each read that lands the block, in block order.
  template <typename F>
  void ForEachRange(F&& f) const {
    if (ranges.empty()) {
      f(FileRange{file, offset, padded_size, 0, size});
      return;
    }
    for (const FileRange& r : ranges) f(r);
  }
};

struct Manifest {
  int version = kContainerVersion;
  std::string name;
  ModelConfig config;
  std::string dense_file = "dense.bin";
  uint64_t dense_size = 0;
  std::vector<TensorEntry> dense;
  // The blocks of the MoE layers only (dense layers have none), layer-major:
  // index ExpertIndex(layer, expert) = MoeLayerRank(layer) * n_experts + expert.
  std::vector<ExpertBlock> experts;
  // Kept tensors the engine never loads (the NextN/MTP layer of GLM-4.5 checkpoints, for
  // speculative decoding): each checksummed in their own file, read one at a time with
  // Container::ReadExtra. Absent from the manifest JSON when empty.
  std::string extra_file = "extra.bin";
  uint64_t extra_size = 0;
  std::vector<TensorEntry> extra;
  nlohmann::json tokenizer = nlohmann::json::object();  // {"files": [...]} and special ids
  nlohmann::json source = nlohmann::json::object();     // provenance: input path, format, quantize

  const TensorEntry* FindDense(std::string_view name) const;
  const TensorEntry* FindExtra(std::string_view name) const;
  // Whether (layer, expert) names a block: layer is a MoE layer, expert in range.
  bool HasExpert(int64_t layer, int64_t expert) const {
    return config.IsMoeLayer(layer) && expert >= 0 && expert < config.n_experts;
  }
  size_t ExpertIndex(int64_t layer, int64_t expert) const {
    return static_cast<size_t>(config.MoeLayerRank(layer) * config.n_experts + expert);
  }
  // Requires HasExpert(layer, expert).
  const ExpertBlock& Expert(int64_t layer, int64_t expert) const {
    return experts[ExpertIndex(layer, expert)];
  }
  size_t ExpertIndex(expert_source::ExpertId id) const { return ExpertIndex(id.layer, id.expert); }
  bool HasExpert(expert_source::ExpertId id) const { return HasExpert(id.layer, id.expert); }
  const ExpertBlock& Expert(expert_source::ExpertId id) const {
    return Expert(id.layer, id.expert);
  }
  uint64_t TotalExpertBytes() const;  // checksummed bytes of every block
  // Bytes of every block rounded to 4 KiB: what reading them all (O_DIRECT) moves and what a
  // cache tier holding them all takes.
  uint64_t PaddedExpertBytes() const;
};

// Bytes of a tensor of `dtype` and `shape` (outermost first; rows of shape.back() elements):
// InvalidArgument for an empty shape, a row length the dtype cannot block, or an overflow.
absl::StatusOr<uint64_t> TensorByteSize(quant::DType dtype, const std::vector<int64_t>& shape);

nlohmann::json ManifestToJson(const Manifest& m);
// Validates everything a reader relies on: version, config, every (layer, expert) present once,
// offsets/sizes consistent with dtypes and shapes, no overflow. Errors name the entry.
// Every file path in it (dense.file, each block's file, tokenizer.files) is relative and
// inside the model directory: absolute paths and '..' are refused naming the field.
absl::StatusOr<Manifest> ManifestFromJson(const nlohmann::json& j);

// A manifest's file path, checked without touching the disk: non-empty, relative, no '..'
// component. InvalidArgument "manifest: <field> '<path>': bad file name (...)".
absl::Status CheckManifestPath(const std::string& field, const std::string& path);

}  // namespace colibri::model
