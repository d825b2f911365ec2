// Read-only access to GGUF files (versions 2 and 3, little-endian): metadata key/values, the
// tensor directory and views of the tensor bytes.
//
// Contract:
// - GgufFile::Open memory-maps the file read-only; GgufFile::Parse reads an image already in
//   memory, which must outlive the GgufFile (nothing is copied). Every string_view / span a
//   GgufFile hands out points into those bytes and stays valid while the GgufFile lives (also
//   across moves).
// - The input is untrusted: every length, count, offset and type is bounds-checked before
//   use; nothing is allocated in proportion to a count before the remaining bytes show the
//   count can be real; array nesting, tensor dims (<= 4) and name/key lengths are capped.
//   A malformed file is an InvalidArgument error (FailedPrecondition for well-formed files
//   this reader does not support, e.g. a tensor type without a quant::DType) whose message
//   starts with "gguf: " and names the key or tensor, never a crash.
// - Tensors: dims are listed fastest-varying first, as GGUF stores them; a tensor's bytes are
//   rows of dims[0] elements in its quant format (quant::RowBytes). Each tensor's data must
//   lie inside the file, start at a multiple of the alignment (general.alignment, default 32)
//   and not overlap another tensor's.
// - Immutable after construction: safe to share between threads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/core/file_util.h"
#include "colibri/quant/dtype.h"

namespace colibri::model {

// Metadata value types (the gguf_type ids of the format).
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// "uint8", "int32", "float32", "bool", "string", "array", ...; "type(<id>)" for other ids.
std::string GgufTypeName(GgufType type);
// Bytes of one value of a fixed-width type; 0 for kString, kArray and unknown ids.
size_t GgufTypeSize(GgufType type);

class GgufValue {
 public:
  GgufType type() const { return type_; }
  bool IsInteger() const;  // one of the 8 integer types
  bool IsFloat() const;    // float32 or float64

  // Scalar views; nullopt when the type differs or the value does not fit.
  std::optional<int64_t> AsInt64() const;    // any integer type
  std::optional<uint64_t> AsUint64() const;  // any integer type, value >= 0
  std::optional<double> AsDouble() const;    // float32 or float64
  std::optional<bool> AsBool() const;
  std::optional<std::string_view> AsString() const;

  // Arrays (type() == kArray). Elements of a fixed-width type are kept as their raw
  // little-endian bytes; strings and nested arrays are parsed.
  GgufType element_type() const { return element_type_; }
  uint64_t size() const { return count_; }
  std::span<const uint8_t> element_bytes() const { return element_bytes_; }
  const std::vector<std::string_view>& strings() const { return strings_; }
  const std::vector<GgufValue>& arrays() const { return arrays_; }
  // Element i of an integer / float array (nullopt for other element types, i >= size(), or
  // a value outside the result type: IntElement of a uint64 above INT64_MAX, UintElement of
  // a negative value).
  std::optional<int64_t> IntElement(uint64_t i) const;
  std::optional<uint64_t> UintElement(uint64_t i) const;
  std::optional<double> FloatElement(uint64_t i) const;

  // "uint32 7", "string 'llama'", "array[string; 512]" (for error messages).
  std::string Describe() const;

 private:
  friend class GgufParser;

  GgufType type_ = GgufType::kUint8;
  uint64_t bits_ = 0;  // integers (sign-extended for signed types) and bool
  double float_ = 0;
  std::string_view string_;
  GgufType element_type_ = GgufType::kUint8;
  uint64_t count_ = 0;
  std::span<const uint8_t> element_bytes_;
  std::vector<std::string_view> strings_;
  std::vector<GgufValue> arrays_;
};

struct GgufKeyValue {
  std::string_view key;
  GgufValue value;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // fastest-varying first; 1..4 entries (0 for a scalar)
  quant::DType type = quant::DType::kF32;
  uint64_t offset = 0;  // from the start of the data section of its file (part)
  uint64_t size_bytes = 0;
  uint32_t part = 0;  // which file of a split model holds it (0: the first / only one)

  int64_t num_elements() const;
  int64_t num_rows() const;  // num_elements() / dims[0] (1 for a scalar)
};

// Whether the file starts with the GGUF magic (false when it cannot be read).
bool HasGgufMagic(const std::filesystem::path& path);

// The name of one part of a split set as llama.cpp's gguf-split writes it,
// "<prefix>-00002-of-00005.gguf".
struct GgufSplitName {
  std::string prefix;
  uint32_t no = 0, count = 0;  // 1-based: part `no` of `count`
  // The file name of part `part_no` (1-based) of the same set.
  std::string PartName(uint32_t part_no) const;
};
// The split-part name a file name is; nullopt for any other name.
std::optional<GgufSplitName> ParseGgufSplitName(std::string_view filename);

class GgufFile {
 public:
  static absl::StatusOr<GgufFile> Open(const std::filesystem::path& path);
  static absl::StatusOr<GgufFile> Parse(std::span<const uint8_t> bytes);
  // A model split into parts as llama.cpp's gguf-split writes them ("<name>-00001-of-00005.gguf",
  // each part with split.no, the first with split.count and split.tensors.count): given the
  // first part, opens every part and lists all their tensors as one file whose metadata is the
  // first part's. A file without split.count is opened as Open does. InvalidArgument for a part
  // other than the first, a missing or mismatched part, or a tensor in two parts.
  static absl::StatusOr<GgufFile> OpenSplit(const std::filesystem::path& first);
  // Parts of a split model (1 for a single file).
  size_t parts() const { return 1 + parts_.size(); }
  // A part's path as opened (empty after Parse), its bytes, its size and where its tensor data
  // starts (what comes before is its header).
  const std::filesystem::path& PartPath(uint32_t part) const;
  std::span<const uint8_t> PartBytes(uint32_t part) const;
  uint64_t PartSize(uint32_t part) const;
  uint64_t PartDataOffset(uint32_t part) const;
  // Where the tensor's bytes start in its part's file.
  uint64_t TensorFileOffset(const GgufTensorInfo& tensor) const;
  // Drops this process's mapped pages of every part (they stay in the page cache): after a pass
  // over tensor data, so the copy made of it is not counted twice in resident memory.
  void ReleasePages() const;

  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // absolute start of tensor data
  std::span<const uint8_t> bytes() const { return bytes_; }

  // Metadata in file order.
  const std::vector<GgufKeyValue>& metadata() const { return metadata_; }
  const GgufValue* Find(std::string_view key) const;

  // Typed getters: NotFound for a missing key; InvalidArgument naming the key and the stored
  // type/value when it has another type or does not fit. Integer getters take any integer
  // type whose value fits; float getters take float32 or float64.
  absl::StatusOr<uint32_t> GetU32(std::string_view key) const;
  absl::StatusOr<uint64_t> GetU64(std::string_view key) const;
  absl::StatusOr<int32_t> GetI32(std::string_view key) const;
  absl::StatusOr<int64_t> GetI64(std::string_view key) const;
  absl::StatusOr<float> GetF32(std::string_view key) const;
  absl::StatusOr<double> GetF64(std::string_view key) const;
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  absl::StatusOr<std::string_view> GetString(std::string_view key) const;
  // The array value itself (any element type).
  absl::StatusOr<const GgufValue*> GetArray(std::string_view key) const;
  absl::StatusOr<std::vector<std::string_view>> GetStringArray(std::string_view key) const;
  absl::StatusOr<std::vector<float>> GetF32Array(std::string_view key) const;
  absl::StatusOr<std::vector<int64_t>> GetIntArray(std::string_view key) const;

  // general.architecture, or "" when absent or not a string.
  std::string_view architecture() const;

  // Tensors in file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;
  // The tensor's size_bytes bytes (checked at parse time to lie inside the file). `tensor`
  // must come from this file's tensors(). The data's address is a multiple of alignment()
  // when the file is mapped (Open); after Parse it is only as aligned as the given bytes.
  std::span<const uint8_t> TensorData(const GgufTensorInfo& tensor) const;

 private:
  friend class GgufParser;
  GgufFile() = default;

  MappedFile file_;  // empty for Parse()
  std::filesystem::path path_;
  std::span<const uint8_t> bytes_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<GgufKeyValue> metadata_;
  std::map<std::string_view, size_t> key_index_;  // keys point into bytes_
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
  std::vector<GgufFile> parts_;  // parts 2.. of a split model (OpenSplit)
};

}  // namespace colibri::model
