// Read-only access to Hugging Face safetensors checkpoints: one file, or shards listed by a
// model.safetensors.index.json. Files are memory-mapped; tensor views stay valid while the
// owning object lives. Every header length, offset and shape is bounds-checked: a malformed
// file is an InvalidArgument error naming the file and tensor, never a crash.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/core/file_util.h"

namespace colibri::model {

enum class StDType { kF32, kF16, kBF16, kF8E4M3, kF64, kI64, kI32, kI16, kI8, kU8, kBool };

struct SafetensorsTensor {
  std::string name;
  StDType dtype = StDType::kF32;
  std::string dtype_name;         // as written in the header ("F32", "BF16", ...)
  std::vector<int64_t> shape;     // row-major, outermost first (as PyTorch)
  std::span<const uint8_t> data;  // exactly numel * element size bytes

  int64_t numel() const;
};

class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::filesystem::path& path);
  // Parses an in-memory image (used by Open and by the fuzzer). `bytes` must outlive the result.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Parse(std::span<const uint8_t> bytes,
                                                                std::string_view label);

  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* Find(const std::string& name) const;

 private:
  MappedFile file_;
  std::map<std::string, SafetensorsTensor> tensors_;
};

// A whole checkpoint directory: model.safetensors, or shards via model.safetensors.index.json.
class SafetensorsCheckpoint {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> Open(
      const std::filesystem::path& dir);

  const SafetensorsTensor* Find(const std::string& name) const;
  // Like Find, but a missing tensor is a NotFound error naming it and the directory.
  absl::StatusOr<const SafetensorsTensor*> Get(const std::string& name) const;
  std::vector<std::string> Names() const;

 private:
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsTensor*> index_;
};

// Converts an F32/F16/BF16 tensor to float32 values. Other dtypes: FailedPrecondition.
absl::StatusOr<std::vector<float>> TensorToFloat32(const SafetensorsTensor& t);

// FP8 e4m3 ("e4m3fn": no infinities, 0x7f/0xff NaN) to float.
float Fp8E4M3ToF32(uint8_t b);

}  // namespace colibri::model
