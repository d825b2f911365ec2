// Writing and opening colibri model directories (see manifest.h for the layout).
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
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
  // The same, each part's bytes written by `fill` straight into the block (size: its bytes), so
  // a kept block moves from the source's read buffer to the write without a copy in between.
  struct PartFill {
    std::string name;
    quant::DType dtype;
    std::vector<int64_t> shape;  // [rows, cols]
    std::function<absl::Status(uint8_t* dst, size_t size)> fill;
  };
  absl::Status AddExpertFrom(int64_t layer, int64_t expert, const std::vector<PartFill>& parts);
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

  class BlockWriter;  // experts.bin: O_DIRECT writes on their own thread (container.cc)

  std::filesystem::path out_, partial_;
  Options options_;
  Manifest manifest_;
  std::FILE* dense_ = nullptr;
  std::unique_ptr<BlockWriter> experts_;
  std::FILE* extra_ = nullptr;  // opened by the first AddExtra
  uint64_t dense_pos_ = 0, experts_pos_ = 0, extra_pos_ = 0;
  std::vector<bool> expert_done_;
  bool finished_ = false;
};

class GgufInPlace;

// The GGUF a model path names, if it names one: a GGUF file (any part of a split set names its
// first part), or a directory without manifest.json holding one model's GGUF. nullopt for
// anything else (a colibri model directory); InvalidArgument listing them when a directory holds
// several models' GGUFs.
absl::StatusOr<std::optional<std::filesystem::path>> FindGgufModel(
    const std::filesystem::path& path);

// An opened model: a colibri model directory (the validated manifest and the files it names,
// checked to exist with the sizes the manifest needs), or a GGUF served in place (FindGgufModel;
// gguf_in_place.h): its manifest derived from the header with the importer's own walk, dense
// weights converted on LoadDense, expert blocks read from their slices of the fused tensors.
// Thread-safe after Open.
class Container {
 public:
  static absl::StatusOr<std::unique_ptr<Container>> Open(const std::filesystem::path& path);
  ~Container();

  const Manifest& manifest() const { return manifest_; }
  // The directory the manifest's file names are relative to (a GGUF's directory in place).
  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path ExpertFilePath(const ExpertBlock& block) const { return dir_ / block.file; }
  std::filesystem::path FilePath(const std::string& file) const { return dir_ / file; }
  bool in_place() const { return gguf_ != nullptr; }
  // Where state kept with the model goes (routing heat, tune profile): the model directory, or a
  // GGUF's sidecar directory (beside it when writable, else in the cache directory; empty when
  // neither can be written).
  const std::filesystem::path& state_dir() const { return state_dir_; }
  // What tokenizer::LoadTokenizer reads: the model directory, or the GGUF's first part.
  std::filesystem::path tokenizer_path() const;

  // Checks a block's bytes (as an ExpertSource landed them) against its checksum: DataLoss
  // naming the block and `where` on a mismatch. A GGUF block read for the first time has its
  // checksum recorded (and persisted) instead; later reads are checked against it.
  absl::Status VerifyExpertBlock(const ExpertBlock& block, const uint8_t* data,
                                 std::string_view where) const;

  // Reads dense.bin into memory and verifies every tensor's checksum.
  struct DenseWeights {
    AlignedBytes buffer;
    uint64_t size = 0;
    absl::StatusOr<TensorView> Get(const Manifest& m, std::string_view name) const;
  };
  absl::StatusOr<DenseWeights> LoadDense() const;

  // Reads one expert block (padded size, its ranges) with pread and verifies it. Used by
  // `colibri-cli verify` and tests; the serving path goes through an ExpertSource.
  absl::StatusOr<AlignedBytes> ReadExpertBlock(int64_t layer, int64_t expert) const;
  absl::StatusOr<AlignedBytes> ReadExpertBlock(expert_source::ExpertId id) const {
    return ReadExpertBlock(id.layer, id.expert);
  }

  // Reads one kept extra tensor (Manifest::extra) and verifies its checksum: NotFound naming it
  // when the model has no such tensor, DataLoss on a mismatch. The bytes start at offset 0.
  absl::StatusOr<AlignedBytes> ReadExtra(std::string_view name) const;

 private:
  Container() = default;
  std::filesystem::path dir_, state_dir_;
  Manifest manifest_;
  std::unique_ptr<GgufInPlace> gguf_;
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

// Reads and checks the whole model: its dense weights, every expert block (O_DIRECT, four in
// flight: a disk reads several times faster with more than one request queued) and every extra
// tensor. The failures, each naming its item (empty: all good); a GGUF's checksums are recorded
// or checked. `progress(done, total)` (optional) gets the expert bytes read so far, from one
// thread at a time. `colibri-cli verify` and `doctor --deep`.
std::vector<absl::Status> VerifyModel(
    const Container& container,
    const std::function<void(uint64_t done, uint64_t total)>& progress = nullptr);

// The checksum of a block's bytes at `data`: of its `size` bytes for a container's block, of its
// parts' bytes only for a block gathered from ranges (the rest belongs to its neighbours).
uint64_t BlockChecksum(const ExpertBlock& block, const uint8_t* data);

// Checksum mismatch error with full context.
absl::Status ExpertChecksumError(const ExpertBlock& block, const std::string& where, uint64_t got);

}  // namespace colibri::model
