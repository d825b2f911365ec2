// Builds GGUF files (version 3 by default, or 2): metadata in insertion order, tensor infos,
// then the tensor data, each tensor aligned to the alignment (general.alignment is written
// when it is not the default 32).
//
// Used by tests and tools to make small files; it keeps copies of all tensor bytes in memory.
// AddRawTensorInfo deliberately allows inconsistent tensor infos (any type id, offset, dims)
// so tests can build malformed files; everything else is validated.
// Not thread-safe; one writer per thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "colibri/model/gguf_reader.h"
#include "colibri/quant/dtype.h"

namespace colibri::model {

// An owned metadata value to write.
class GgufWriteValue {
 public:
  static GgufWriteValue Uint8(uint8_t v) { return Int(GgufType::kUint8, v); }
  static GgufWriteValue Int8(int8_t v) { return Int(GgufType::kInt8, static_cast<uint64_t>(v)); }
  static GgufWriteValue Uint16(uint16_t v) { return Int(GgufType::kUint16, v); }
  static GgufWriteValue Int16(int16_t v) { return Int(GgufType::kInt16, static_cast<uint64_t>(v)); }
  static GgufWriteValue Uint32(uint32_t v) { return Int(GgufType::kUint32, v); }
  static GgufWriteValue Int32(int32_t v) { return Int(GgufType::kInt32, static_cast<uint64_t>(v)); }
  static GgufWriteValue Uint64(uint64_t v) { return Int(GgufType::kUint64, v); }
  static GgufWriteValue Int64(int64_t v) { return Int(GgufType::kInt64, static_cast<uint64_t>(v)); }
  static GgufWriteValue Float32(float v);
  static GgufWriteValue Float64(double v);
  static GgufWriteValue Bool(bool v) { return Int(GgufType::kBool, v ? 1 : 0); }
  static GgufWriteValue String(std::string v);
  // All elements must have element_type (checked by GgufWriter::Add).
  static GgufWriteValue Array(GgufType element_type, std::vector<GgufWriteValue> elements);
  static GgufWriteValue StringArray(const std::vector<std::string>& v);
  static GgufWriteValue Float32Array(std::span<const float> v);
  static GgufWriteValue Int32Array(std::span<const int32_t> v);

  GgufType type() const { return type_; }

  // Appends the value's encoding without its type tag (arrays: element type, count, elements).
  void AppendPayload(std::vector<uint8_t>* out) const;

 private:
  friend class GgufWriter;
  static GgufWriteValue Int(GgufType t, uint64_t bits);

  GgufType type_ = GgufType::kUint8;
  uint64_t bits_ = 0;  // integers (two's complement) and bool
  double float_ = 0;
  std::string string_;
  GgufType element_type_ = GgufType::kUint8;
  std::vector<GgufWriteValue> elements_;
};

class GgufWriter {
 public:
  struct Options {
    uint32_t version = 3;     // 2 or 3 (same layout)
    uint32_t alignment = 32;  // a power of two
  };

  GgufWriter() : GgufWriter(Options{}) {}
  explicit GgufWriter(Options options);

  // InvalidArgument for a duplicate key or an array whose elements are not all element_type.
  absl::Status Add(std::string key, GgufWriteValue value);
  absl::Status AddU32(std::string key, uint32_t v) {
    return Add(std::move(key), GgufWriteValue::Uint32(v));
  }
  absl::Status AddF32(std::string key, float v) {
    return Add(std::move(key), GgufWriteValue::Float32(v));
  }
  absl::Status AddString(std::string key, std::string v) {
    return Add(std::move(key), GgufWriteValue::String(std::move(v)));
  }

  // A tensor of `type` with dims fastest-varying first; `data` must be exactly its byte size
  // (quant::CheckedRowBytes(type, dims[0]) per row). Copied. InvalidArgument otherwise, or
  // for a duplicate name or more than 4 dims.
  absl::Status AddTensor(std::string name, std::vector<int64_t> dims, quant::DType type,
                         std::span<const uint8_t> data);

  // Writes a tensor info exactly as given, with no data and no checks (offset relative to
  // the data section). For building malformed files in tests.
  struct RawTensorInfo {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type_id = 0;
    uint64_t offset = 0;
  };
  void AddRawTensorInfo(RawTensorInfo info);

  // The whole file image.
  absl::StatusOr<std::vector<uint8_t>> Serialize() const;
  absl::Status WriteFile(const std::filesystem::path& path) const;

 private:
  struct Tensor {
    RawTensorInfo info;
    std::vector<uint8_t> data;  // empty for raw infos
    bool raw = false;
  };

  Options options_;
  std::vector<std::pair<std::string, GgufWriteValue>> metadata_;
  std::vector<Tensor> tensors_;
  uint64_t data_size_ = 0;  // bytes of tensor data so far, padded to the alignment
};

}  // namespace colibri::model
