// Writing and opening colibri model directories (see manifest.h for the layout).
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/core/file_util.h"
#include "colibri/model/manifest.h"

namespace colibri::model {

// A read-only view of one tensor's bytes in memory.
struct TensorView {
  quant::DType dtype = quant::DType::kF32;
  int64_t rows = 0;  // outer dimension(s) flattened
  int64_t cols = 0;  // innermost dimension (elements per row)
  const uint8_t* data = nullptr;
  size_t size = 0;  // bytes
};

TensorView ViewOf(const TensorEntry& entry, const uint8_t* base);

// Builds a model directory. Everything is written into "<out>.partial/" and renamed to <out>
// only by Finish(), after manifest.json is fsync'ed: an interrupted conversion never leaves
// a directory that looks like a whole model. Not thread-safe.
class ContainerWriter {
 public:
  struct Options {
    bool split_experts = false;  // one file per expert under experts/
    bool overwrite = false;      // replace an existing <out>
  };
  struct Part {
    std::string name;  // gate | up | down; gate_bias | up_bias | down_bias (F32 [1, n])
    quant::DType dtype;
    std::vector<int64_t> shape;  // [rows, cols]
    std::span<const uint8_t> bytes;
  };

  static absl::StatusOr<std::unique_ptr<ContainerWriter>> Create(const std::filesystem::path& out,
                                                                 const std::string& name,
                                                                 const ModelConfig& config,
                                                                 Options options);
  ~ContainerWriter();

  absl::Status AddDense(const std::string& name, quant::DType dtype, std::vector<int64_t> shape,
                        std::span<const uint8_t> bytes);
  absl::Status AddExpert(int64_t layer, int64_t expert, const std::vector<Part>& parts);
  // A tensor kept in extra.bin, never loaded by the engine (manifest.h: Manifest::extra).
  absl::Status AddExtra(const std::string& name, quant::DType dtype, std::vector<int64_t> shape,
                        std::span<const uint8_t> bytes);
  // Copies an auxiliary file (tokenizer files) into the model directory.
  absl::Status CopyFile(const std::filesystem::path& src, const std::string& dest_name);
  // Writes an auxiliary file (e.g. tokenizer.gguf) into the model directory.
  absl::Status WriteAuxFile(const std::string& dest_name, std::span<const uint8_t> bytes);
  Manifest& manifest() { return manifest_; }
  // Checks completeness, writes manifest.json, fsyncs, renames into place.
  absl::Status Finish();

 private:
  ContainerWriter() = default;
  absl::Status AppendAligned(std::FILE* f, uint64_t* pos, uint64_t align,
                             std::span<const uint8_t> bytes, const std::filesystem::path& path);
  // Appends one checksummed tensor to `file` (dense.bin or extra.bin) and lists it in `list`.
  absl::Status AddTensor(std::FILE* f, uint64_t* pos, const std::string& file,
                         std::vector<TensorEntry>* list, const std::string& name,
                         quant::DType dtype, std::vector<int64_t> shape,
                         std::span<const uint8_t> bytes);

  std::filesystem::path out_, partial_;
  Options options_;
  Manifest manifest_;
  std::FILE* dense_ = nullptr;
  std::FILE* experts_ = nullptr;
  std::FILE* extra_ = nullptr;  // opened by the first AddExtra
  uint64_t dense_pos_ = 0, experts_pos_ = 0, extra_pos_ = 0;
  std::vector<bool> expert_done_;
  bool finished_ = false;
};

// An opened model directory: the validated manifest and the files it names, checked to exist
// with the sizes the manifest needs. Thread-safe after Open (read-only).
class Container {
 public:
  static absl::StatusOr<std::unique_ptr<Container>> Open(const std::filesystem::path& dir);

  const Manifest& manifest() const { return manifest_; }
  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path ExpertFilePath(const ExpertBlock& block) const { return dir_ / block.file; }

  // Reads dense.bin into memory and verifies every tensor's checksum.
  struct DenseWeights {
    AlignedBytes buffer;
    uint64_t size = 0;
    absl::StatusOr<TensorView> Get(const Manifest& m, std::string_view name) const;
  };
  absl::StatusOr<DenseWeights> LoadDense() const;

  // Reads one expert block (padded size) with pread and verifies its checksum. Used by
  // `colibri-cli verify` and tests; the serving path goes through an ExpertSource.
  absl::StatusOr<AlignedBytes> ReadExpertBlock(int64_t layer, int64_t expert) const;
  absl::StatusOr<AlignedBytes> ReadExpertBlock(expert_source::ExpertId id) const {
    return ReadExpertBlock(id.layer, id.expert);
  }

  // Reads one kept extra tensor (Manifest::extra) and verifies its checksum: NotFound naming it
  // when the model has no such tensor, DataLoss on a mismatch. The bytes start at offset 0.
  absl::StatusOr<AlignedBytes> ReadExtra(std::string_view name) const;

 private:
  std::filesystem::path dir_;
  Manifest manifest_;
};

// Views of the three matrices of an expert block held at `block_data`, and its biases when the
// block has them (data == nullptr otherwise).
struct ExpertWeights {
  TensorView gate;       // [expert_ffn, hidden]
  TensorView up;         // [expert_ffn, hidden]
  TensorView down;       // [hidden, expert_ffn]
  TensorView gate_bias;  // f32 [1, expert_ffn]
  TensorView up_bias;    // f32 [1, expert_ffn]
  TensorView down_bias;  // f32 [1, hidden]
};
ExpertWeights ExpertWeightsOf(const ExpertBlock& block, const uint8_t* block_data);

// Checksum mismatch error with full context.
absl::Status ExpertChecksumError(const ExpertBlock& block, const std::string& where, uint64_t got);

}  // namespace colibri::model
