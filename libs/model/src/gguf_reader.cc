#include "colibri/model/gguf_reader.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "colibri/core/status.h"

namespace colibri::model {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader assumes a little-endian host");

// Debian's abseil has its own string_view type, so std::string_view is bridged explicitly.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Limits on untrusted sizes (all far above what real files use).
constexpr uint64_t kMaxKeyLength = 65535;        // the GGUF spec's limit for keys
constexpr uint64_t kMaxTensorNameLength = 1024;  // GGML itself stops at 63
constexpr uint32_t kMaxDims = 4;
constexpr int kMaxArrayDepth = 4;  // array of array of ... of scalars
constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;

// Smallest encodings, used to reject counts that cannot fit in the remaining bytes before
// anything is allocated for them.
constexpr uint64_t kMinKeyValueBytes = 8 + 4 + 1;        // key length, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // name length, n_dims, type, offset
constexpr uint64_t kMinNestedArrayBytes = 4 + 8;         // element type, count

// GGML type names for error messages about types we do not support.
std::string GgmlTypeName(uint32_t id) {
  static constexpr std::pair<uint32_t, const char*> kNames[] = {
      {0, "f32"},     {1, "f16"},      {2, "q4_0"},   {3, "q4_1"},    {6, "q5_0"},
      {7, "q5_1"},    {8, "q8_0"},     {9, "q8_1"},   {10, "q2_k"},   {11, "q3_k"},
      {12, "q4_k"},   {13, "q5_k"},    {14, "q6_k"},  {15, "q8_k"},   {16, "iq2_xxs"},
      {17, "iq2_xs"}, {18, "iq3_xxs"}, {19, "iq1_s"}, {20, "iq4_nl"}, {21, "iq3_s"},
      {22, "iq2_s"},  {23, "iq4_xs"},  {24, "i8"},    {25, "i16"},    {26, "i32"},
      {27, "i64"},    {28, "f64"},     {29, "iq1_m"}, {30, "bf16"},   {34, "tq1_0"},
      {35, "tq2_0"},  {39, "mxfp4"}};
  for (const auto& [k, name] : kNames) {
    if (k == id) return name;
  }
  return "unknown";
}

bool IsIntegerType(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64: return true;
    default: return false;
  }
}

bool IsSignedType(GgufType t) {
  return t == GgufType::kInt8 || t == GgufType::kInt16 || t == GgufType::kInt32 ||
         t == GgufType::kInt64;
}

bool IsValidType(uint32_t id) { return id <= static_cast<uint32_t>(GgufType::kFloat64); }

// Reads one integer of type t from raw little-endian bytes, sign- or zero-extended.
uint64_t LoadIntBits(GgufType t, const uint8_t* p) {
  switch (t) {
    case GgufType::kUint8: return p[0];
    case GgufType::kInt8:
      return static_cast<uint64_t>(static_cast<int64_t>(static_cast<int8_t>(p[0])));
    case GgufType::kUint16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case GgufType::kInt16: {
      int16_t v;
      std::memcpy(&v, p, 2);
      return static_cast<uint64_t>(static_cast<int64_t>(v));
    }
    case GgufType::kUint32: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case GgufType::kInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return static_cast<uint64_t>(static_cast<int64_t>(v));
    }
    case GgufType::kUint64:
    case GgufType::kInt64: {
      uint64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
    default: return 0;
  }
}

double LoadFloat(GgufType t, const uint8_t* p) {
  if (t == GgufType::kFloat32) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  double v;
  std::memcpy(&v, p, 8);
  return v;
}

std::optional<int64_t> BitsAsInt64(GgufType t, uint64_t bits) {
  if (!IsSignedType(t) && bits > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return std::nullopt;
  }
  return static_cast<int64_t>(bits);
}

std::optional<uint64_t> BitsAsUint64(GgufType t, uint64_t bits) {
  if (IsSignedType(t) && static_cast<int64_t>(bits) < 0) return std::nullopt;
  return bits;
}

std::string Quoted(std::string_view key) { return absl::StrCat("'", Sv(key), "'"); }

absl::Status Malformed(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("gguf: ", Sv(what)));
}

}  // namespace

std::string GgufTypeName(GgufType type) {
  switch (type) {
    case GgufType::kUint8: return "uint8";
    case GgufType::kInt8: return "int8";
    case GgufType::kUint16: return "uint16";
    case GgufType::kInt16: return "int16";
    case GgufType::kUint32: return "uint32";
    case GgufType::kInt32: return "int32";
    case GgufType::kFloat32: return "float32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kUint64: return "uint64";
    case GgufType::kInt64: return "int64";
    case GgufType::kFloat64: return "float64";
  }
  return absl::StrCat("type(", static_cast<uint32_t>(type), ")");
}

size_t GgufTypeSize(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool: return 1;
    case GgufType::kUint16:
    case GgufType::kInt16: return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32: return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64: return 8;
    default: return 0;
  }
}

// ---- GgufValue ---------------------------------------------------------------------------

bool GgufValue::IsInteger() const { return IsIntegerType(type_); }
bool GgufValue::IsFloat() const {
  return type_ == GgufType::kFloat32 || type_ == GgufType::kFloat64;
}

std::optional<int64_t> GgufValue::AsInt64() const {
  if (!IsInteger()) return std::nullopt;
  return BitsAsInt64(type_, bits_);
}

std::optional<uint64_t> GgufValue::AsUint64() const {
  if (!IsInteger()) return std::nullopt;
  return BitsAsUint64(type_, bits_);
}

std::optional<double> GgufValue::AsDouble() const {
  if (!IsFloat()) return std::nullopt;
  return float_;
}

std::optional<bool> GgufValue::AsBool() const {
  if (type_ != GgufType::kBool) return std::nullopt;
  return bits_ != 0;
}

std::optional<std::string_view> GgufValue::AsString() const {
  if (type_ != GgufType::kString) return std::nullopt;
  return string_;
}

std::optional<int64_t> GgufValue::IntElement(uint64_t i) const {
  if (type_ != GgufType::kArray || !IsIntegerType(element_type_) || i >= count_) {
    return std::nullopt;
  }
  const size_t width = GgufTypeSize(element_type_);
  return BitsAsInt64(element_type_, LoadIntBits(element_type_, element_bytes_.data() + i * width));
}

std::optional<uint64_t> GgufValue::UintElement(uint64_t i) const {
  if (type_ != GgufType::kArray || !IsIntegerType(element_type_) || i >= count_) {
    return std::nullopt;
  }
  const size_t width = GgufTypeSize(element_type_);
  return BitsAsUint64(element_type_, LoadIntBits(element_type_, element_bytes_.data() + i * width));
}

std::optional<double> GgufValue::FloatElement(uint64_t i) const {
  if (type_ != GgufType::kArray || i >= count_) return std::nullopt;
  if (element_type_ != GgufType::kFloat32 && element_type_ != GgufType::kFloat64) {
    return std::nullopt;
  }
  const size_t width = GgufTypeSize(element_type_);
  return LoadFloat(element_type_, element_bytes_.data() + i * width);
}

std::string GgufValue::Describe() const {
  switch (type_) {
    case GgufType::kString:
      return absl::StrCat("string '", Sv(string_.substr(0, 64)),
                          string_.size() > 64 ? "...'" : "'");
    case GgufType::kArray:
      return absl::StrCat("array[", GgufTypeName(element_type_), "; ", count_, "]");
    case GgufType::kBool: return bits_ ? "bool true" : "bool false";
    case GgufType::kFloat32:
    case GgufType::kFloat64: return absl::StrCat(GgufTypeName(type_), " ", float_);
    default:
      if (IsSignedType(type_)) {
        return absl::StrCat(GgufTypeName(type_), " ", static_cast<int64_t>(bits_));
      }
      return absl::StrCat(GgufTypeName(type_), " ", bits_);
  }
}

int64_t GgufTensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // checked against overflow at parse time
  return n;
}

int64_t GgufTensorInfo::num_rows() const {
  if (dims.empty() || dims[0] == 0) return dims.empty() ? 1 : 0;
  return num_elements() / dims[0];
}

// ---- Parser --------------------------------------------------------------------------------

// Cursor over the untrusted bytes; every read is bounds-checked.
class GgufParser {
 public:
  explicit GgufParser(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  absl::Status Run(GgufFile* file);

 private:
  uint64_t remaining() const { return bytes_.size() - pos_; }

  absl::Status Need(uint64_t n, std::string_view what) {
    if (n > remaining()) {
      return Malformed(absl::StrCat("truncated at byte ", pos_, " reading ", Sv(what), " (need ", n,
                                    " bytes, ", remaining(), " left)"));
    }
    return absl::OkStatus();
  }

  template <typename T>
  absl::StatusOr<T> Read(std::string_view what) {
    RETURN_IF_ERROR(Need(sizeof(T), what));
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  absl::StatusOr<std::string_view> ReadString(uint64_t max_length, std::string_view what) {
    ASSIGN_OR_RETURN(const uint64_t length, Read<uint64_t>(what));
    if (length > max_length) {
      return Malformed(
          absl::StrCat(Sv(what), ": length ", length, " exceeds the limit ", max_length));
    }
    RETURN_IF_ERROR(Need(length, what));
    std::string_view s(reinterpret_cast<const char*>(bytes_.data() + pos_),
                       static_cast<size_t>(length));
    pos_ += length;
    return s;
  }

  absl::StatusOr<GgufValue> ReadValue(GgufType type, int depth, std::string_view what);
  absl::StatusOr<GgufTensorInfo> ReadTensorInfo(uint64_t index);

  std::span<const uint8_t> bytes_;
  uint64_t pos_ = 0;
};

absl::StatusOr<GgufValue> GgufParser::ReadValue(GgufType type, int depth, std::string_view what) {
  GgufValue v;
  v.type_ = type;
  if (IsIntegerType(type)) {
    const size_t width = GgufTypeSize(type);
    RETURN_IF_ERROR(Need(width, what));
    v.bits_ = LoadIntBits(type, bytes_.data() + pos_);
    pos_ += width;
    return v;
  }
  switch (type) {
    case GgufType::kFloat32:
    case GgufType::kFloat64: {
      const size_t width = GgufTypeSize(type);
      RETURN_IF_ERROR(Need(width, what));
      v.float_ = LoadFloat(type, bytes_.data() + pos_);
      pos_ += width;
      return v;
    }
    case GgufType::kBool: {
      ASSIGN_OR_RETURN(const uint8_t b, Read<uint8_t>(what));
      if (b > 1) return Malformed(absl::StrCat(Sv(what), ": invalid bool byte ", b));
      v.bits_ = b;
      return v;
    }
    case GgufType::kString: {
      ASSIGN_OR_RETURN(v.string_, ReadString(std::numeric_limits<uint64_t>::max(), what));
      return v;
    }
    case GgufType::kArray: {
      if (depth >= kMaxArrayDepth) {
        return Malformed(absl::StrCat(Sv(what), ": arrays nested deeper than ", kMaxArrayDepth));
      }
      ASSIGN_OR_RETURN(const uint32_t element_id, Read<uint32_t>(what));
      if (!IsValidType(element_id)) {
        return Malformed(absl::StrCat(Sv(what), ": invalid array element type ", element_id));
      }
      v.element_type_ = static_cast<GgufType>(element_id);
      ASSIGN_OR_RETURN(v.count_, Read<uint64_t>(what));
      const size_t width = GgufTypeSize(v.element_type_);
      if (width != 0) {
        if (v.count_ > remaining() / width) {
          return Malformed(absl::StrCat(Sv(what), ": array of ", v.count_, " ",
                                        GgufTypeName(v.element_type_), " exceeds the ", remaining(),
                                        " bytes left"));
        }
        v.element_bytes_ = bytes_.subspan(pos_, static_cast<size_t>(v.count_ * width));
        if (v.element_type_ == GgufType::kBool) {
          for (uint8_t b : v.element_bytes_) {
            if (b > 1) return Malformed(absl::StrCat(Sv(what), ": invalid bool byte ", b));
          }
        }
        pos_ += v.count_ * width;
        return v;
      }
      if (v.element_type_ == GgufType::kString) {
        if (v.count_ > remaining() / 8) {  // each string needs at least its 8-byte length
          return Malformed(absl::StrCat(Sv(what), ": array of ", v.count_, " strings exceeds the ",
                                        remaining(), " bytes left"));
        }
        v.strings_.reserve(static_cast<size_t>(v.count_));
        for (uint64_t i = 0; i < v.count_; ++i) {
          ASSIGN_OR_RETURN(std::string_view s,
                           ReadString(std::numeric_limits<uint64_t>::max(), what));
          v.strings_.push_back(s);
        }
        return v;
      }
      // Nested arrays.
      if (v.count_ > remaining() / kMinNestedArrayBytes) {
        return Malformed(absl::StrCat(Sv(what), ": array of ", v.count_, " arrays exceeds the ",
                                      remaining(), " bytes left"));
      }
      v.arrays_.reserve(static_cast<size_t>(v.count_));
      for (uint64_t i = 0; i < v.count_; ++i) {
        ASSIGN_OR_RETURN(GgufValue element, ReadValue(GgufType::kArray, depth + 1, what));
        v.arrays_.push_back(std::move(element));
      }
      return v;
    }
    default:
      return Malformed(
          absl::StrCat(Sv(what), ": invalid value type ", static_cast<uint32_t>(type)));
  }
}

absl::StatusOr<GgufTensorInfo> GgufParser::ReadTensorInfo(uint64_t index) {
  const std::string label = absl::StrCat("tensor #", index);
  GgufTensorInfo t;
  ASSIGN_OR_RETURN(std::string_view name, ReadString(kMaxTensorNameLength, label + " name"));
  t.name = std::string(name);
  const std::string what = absl::StrCat("tensor '", Sv(name), "'");
  ASSIGN_OR_RETURN(const uint32_t n_dims, Read<uint32_t>(what));
  if (n_dims > kMaxDims) {
    return Malformed(absl::StrCat(what, ": ", n_dims, " dims (at most ", kMaxDims, ")"));
  }
  int64_t elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    ASSIGN_OR_RETURN(const uint64_t dim, Read<uint64_t>(what));
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Malformed(absl::StrCat(what, ": dim ", d, " = ", dim, " is too large"));
    }
    const auto sdim = static_cast<int64_t>(dim);
    if (sdim != 0 && elements > std::numeric_limits<int64_t>::max() / sdim) {
      return Malformed(absl::StrCat(what, ": element count overflows"));
    }
    elements *= sdim;
    t.dims.push_back(sdim);
  }
  ASSIGN_OR_RETURN(const uint32_t type_id, Read<uint32_t>(what));
  if (!quant::IsKnownDType(type_id)) {
    return absl::FailedPreconditionError(absl::StrCat("gguf: ", what, ": unsupported ggml type ",
                                                      type_id, " (", GgmlTypeName(type_id), ")"));
  }
  t.type = static_cast<quant::DType>(type_id);
  ASSIGN_OR_RETURN(t.offset, Read<uint64_t>(what));

  // Byte size: rows of dims[0] elements.
  const int64_t row_elems = t.dims.empty() ? 1 : t.dims[0];
  const int64_t rows = row_elems == 0 ? 0 : elements / row_elems;
  auto row_bytes = quant::CheckedRowBytes(t.type, row_elems);
  if (!row_bytes.ok()) {
    return Malformed(absl::StrCat(what, ": ", row_bytes.status().message()));
  }
  if (rows != 0 &&
      *row_bytes > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(rows)) {
    return Malformed(absl::StrCat(what, ": byte size overflows"));
  }
  t.size_bytes = *row_bytes * static_cast<uint64_t>(rows);
  return t;
}

absl::Status GgufParser::Run(GgufFile* file) {
  if (bytes_.size() < 4) return Malformed("file too small for the GGUF magic");
  if (std::memcmp(bytes_.data(), "GGUF", 4) != 0) {
    if (std::memcmp(bytes_.data(), "FUGG", 4) == 0) {
      return absl::FailedPreconditionError("gguf: big-endian GGUF files are not supported");
    }
    return Malformed("bad magic (not a GGUF file)");
  }
  pos_ = 4;
  ASSIGN_OR_RETURN(file->version_, Read<uint32_t>("version"));
  if (file->version_ != 2 && file->version_ != 3) {
    return absl::FailedPreconditionError(
        absl::StrCat("gguf: unsupported version ", file->version_, " (2 and 3 are)"));
  }
  ASSIGN_OR_RETURN(const uint64_t n_tensors, Read<uint64_t>("tensor count"));
  ASSIGN_OR_RETURN(const uint64_t n_kv, Read<uint64_t>("metadata count"));
  if (n_kv > remaining() / kMinKeyValueBytes) {
    return Malformed(
        absl::StrCat("metadata count ", n_kv, " exceeds the ", remaining(), " bytes left"));
  }
  if (n_tensors > remaining() / kMinTensorInfoBytes) {
    return Malformed(
        absl::StrCat("tensor count ", n_tensors, " exceeds the ", remaining(), " bytes left"));
  }

  file->metadata_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    ASSIGN_OR_RETURN(std::string_view key,
                     ReadString(kMaxKeyLength, absl::StrCat("metadata key #", i)));
    const std::string what = absl::StrCat("key ", Quoted(key));
    ASSIGN_OR_RETURN(const uint32_t type_id, Read<uint32_t>(what));
    if (!IsValidType(type_id)) {
      return Malformed(absl::StrCat(what, ": invalid value type ", type_id));
    }
    ASSIGN_OR_RETURN(GgufValue value, ReadValue(static_cast<GgufType>(type_id), 0, what));
    if (!file->key_index_.emplace(key, file->metadata_.size()).second) {
      return Malformed(absl::StrCat("duplicate ", what));
    }
    file->metadata_.push_back({key, std::move(value)});
  }

  if (const GgufValue* a = file->Find("general.alignment")) {
    const std::optional<uint64_t> alignment = a->AsUint64();
    if (!alignment || *alignment == 0 || *alignment > kMaxAlignment ||
        !std::has_single_bit(*alignment)) {
      return Malformed(absl::StrCat("key 'general.alignment': ", a->Describe(),
                                    " is not a power of two up to ", kMaxAlignment));
    }
    file->alignment_ = *alignment;
  }

  if (n_tensors > remaining() / kMinTensorInfoBytes) {
    return Malformed(
        absl::StrCat("tensor count ", n_tensors, " exceeds the ", remaining(), " bytes left"));
  }
  file->tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    ASSIGN_OR_RETURN(GgufTensorInfo t, ReadTensorInfo(i));
    if (t.offset % file->alignment_ != 0) {
      return Malformed(absl::StrCat("tensor '", t.name, "': offset ", t.offset,
                                    " is not a multiple of the alignment ", file->alignment_));
    }
    if (!file->tensor_index_.emplace(t.name, file->tensors_.size()).second) {
      return Malformed(absl::StrCat("duplicate tensor '", t.name, "'"));
    }
    file->tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment (pos_ <= file size, and the
  // alignment is at most 2^30, so this cannot overflow).
  file->data_offset_ = (pos_ + file->alignment_ - 1) / file->alignment_ * file->alignment_;
  const uint64_t file_size = bytes_.size();
  // A file cut short (the usual state of a huge download that stopped) is named as such, with
  // what is missing, before any one tensor is blamed.
  uint64_t need = 0;
  const GgufTensorInfo* first_cut = nullptr;
  for (const GgufTensorInfo& t : file->tensors_) {
    if (t.offset > std::numeric_limits<uint64_t>::max() / 2 ||
        t.size_bytes > std::numeric_limits<uint64_t>::max() / 4) {
      continue;  // absurd values: the check below names them
    }
    const uint64_t end = file->data_offset_ + t.offset + t.size_bytes;
    need = std::max(need, end);
    if (end > file_size && (first_cut == nullptr || t.offset < first_cut->offset)) first_cut = &t;
  }
  if (first_cut != nullptr && need > file_size && file_size >= file->data_offset_) {
    return absl::DataLossError(absl::StrCat(
        "gguf: the file is truncated: ", file_size, " bytes, its tensors need ", need, " (",
        need - file_size, " bytes missing, ",
        absl::StrFormat("%.1f%%",
                        100.0 * static_cast<double>(need - file_size) / static_cast<double>(need)),
        "; tensor '", first_cut->name,
        "' and those after it are incomplete) -- an unfinished "
        "download?"));
  }
  for (const GgufTensorInfo& t : file->tensors_) {
    const uint64_t available = file_size > file->data_offset_ ? file_size - file->data_offset_ : 0;
    if (t.offset > available || t.size_bytes > available - t.offset) {
      const uint64_t absolute = t.offset > std::numeric_limits<uint64_t>::max() - file->data_offset_
                                    ? std::numeric_limits<uint64_t>::max()
                                    : file->data_offset_ + t.offset;
      return Malformed(absl::StrCat("tensor '", t.name, "': offset ", absolute, " + size ",
                                    t.size_bytes, " exceeds file size ", file_size));
    }
  }

  // No two tensors may share bytes.
  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(file->tensors_.size());
  for (const GgufTensorInfo& t : file->tensors_) {
    if (t.size_bytes != 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& prev = *by_offset[i - 1];
    const GgufTensorInfo& cur = *by_offset[i];
    if (prev.offset + prev.size_bytes > cur.offset) {
      return Malformed(absl::StrCat("tensor '", cur.name, "' at data offset ", cur.offset,
                                    " overlaps tensor '", prev.name, "' (", prev.offset, " + ",
                                    prev.size_bytes, ")"));
    }
  }
  file->bytes_ = bytes_;
  return absl::OkStatus();
}

// ---- GgufFile ------------------------------------------------------------------------------

absl::StatusOr<GgufFile> GgufFile::Parse(std::span<const uint8_t> bytes) {
  GgufFile file;
  GgufParser parser(bytes);
  RETURN_IF_ERROR(parser.Run(&file));
  return file;
}

absl::StatusOr<GgufFile> GgufFile::Open(const std::filesystem::path& path) {
  ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::Open(path));
  const std::span<const uint8_t> bytes = mapped.bytes();
  GgufFile file;
  file.file_ = std::move(mapped);  // the mapping's address does not change on move
  file.path_ = path;
  GgufParser parser(bytes);
  absl::Status status = parser.Run(&file);
  if (!status.ok()) return Annotate(status, path.string());
  return file;
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &metadata_[it->second].value;
}

namespace {

absl::Status NotFound(std::string_view key) {
  return absl::NotFoundError(absl::StrCat("gguf: key ", Quoted(key), " not found"));
}

absl::Status WrongType(std::string_view key, const GgufValue& v, std::string_view wanted) {
  return absl::InvalidArgumentError(
      absl::StrCat("gguf: key ", Quoted(key), " is ", v.Describe(), ", expected ", Sv(wanted)));
}

template <typename T>
absl::StatusOr<T> GetInteger(const GgufFile& f, std::string_view key, std::string_view wanted) {
  const GgufValue* v = f.Find(key);
  if (v == nullptr) return NotFound(key);
  if (!v->IsInteger()) return WrongType(key, *v, wanted);
  if constexpr (std::is_signed_v<T>) {
    const std::optional<int64_t> x = v->AsInt64();
    if (!x || *x < std::numeric_limits<T>::min() || *x > std::numeric_limits<T>::max()) {
      return WrongType(key, *v, absl::StrCat(Sv(wanted), " (value does not fit)"));
    }
    return static_cast<T>(*x);
  } else {
    const std::optional<uint64_t> x = v->AsUint64();
    if (!x || *x > std::numeric_limits<T>::max()) {
      return WrongType(key, *v, absl::StrCat(Sv(wanted), " (value does not fit)"));
    }
    return static_cast<T>(*x);
  }
}

}  // namespace

absl::StatusOr<uint32_t> GgufFile::GetU32(std::string_view key) const {
  return GetInteger<uint32_t>(*this, key, "uint32");
}
absl::StatusOr<uint64_t> GgufFile::GetU64(std::string_view key) const {
  return GetInteger<uint64_t>(*this, key, "uint64");
}
absl::StatusOr<int32_t> GgufFile::GetI32(std::string_view key) const {
  return GetInteger<int32_t>(*this, key, "int32");
}
absl::StatusOr<int64_t> GgufFile::GetI64(std::string_view key) const {
  return GetInteger<int64_t>(*this, key, "int64");
}

absl::StatusOr<double> GgufFile::GetF64(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(key);
  if (!v->IsFloat()) return WrongType(key, *v, "float32 or float64");
  return *v->AsDouble();
}

absl::StatusOr<float> GgufFile::GetF32(std::string_view key) const {
  ASSIGN_OR_RETURN(const double d, GetF64(key));
  return static_cast<float>(d);
}

absl::StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(key);
  if (v->type() != GgufType::kBool) return WrongType(key, *v, "bool");
  return *v->AsBool();
}

absl::StatusOr<std::string_view> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(key);
  if (v->type() != GgufType::kString) return WrongType(key, *v, "string");
  return *v->AsString();
}

absl::StatusOr<const GgufValue*> GgufFile::GetArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(key);
  if (v->type() != GgufType::kArray) return WrongType(key, *v, "array");
  return v;
}

absl::StatusOr<std::vector<std::string_view>> GgufFile::GetStringArray(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, GetArray(key));
  if (v->element_type() != GgufType::kString) return WrongType(key, *v, "array[string]");
  return v->strings();
}

absl::StatusOr<std::vector<float>> GgufFile::GetF32Array(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, GetArray(key));
  if (v->element_type() != GgufType::kFloat32 && v->element_type() != GgufType::kFloat64) {
    return WrongType(key, *v, "array[float32]");
  }
  std::vector<float> out(static_cast<size_t>(v->size()));
  for (uint64_t i = 0; i < v->size(); ++i) out[i] = static_cast<float>(*v->FloatElement(i));
  return out;
}

absl::StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, GetArray(key));
  if (!IsIntegerType(v->element_type())) return WrongType(key, *v, "array of integers");
  std::vector<int64_t> out(static_cast<size_t>(v->size()));
  for (uint64_t i = 0; i < v->size(); ++i) {
    const std::optional<int64_t> x = v->IntElement(i);
    if (!x) return WrongType(key, *v, absl::StrCat("int64 elements (element ", i, " too large)"));
    out[i] = *x;
  }
  return out;
}

std::string_view GgufFile::architecture() const {
  const GgufValue* v = Find("general.architecture");
  if (v == nullptr || v->type() != GgufType::kString) return {};
  return *v->AsString();
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const std::filesystem::path& GgufFile::PartPath(uint32_t part) const {
  return part == 0 ? path_ : parts_[part - 1].path_;
}

std::span<const uint8_t> GgufFile::PartBytes(uint32_t part) const {
  return part == 0 ? bytes_ : parts_[part - 1].bytes_;
}

uint64_t GgufFile::PartSize(uint32_t part) const { return PartBytes(part).size(); }

uint64_t GgufFile::PartDataOffset(uint32_t part) const {
  return part == 0 ? data_offset_ : parts_[part - 1].data_offset_;
}

uint64_t GgufFile::TensorFileOffset(const GgufTensorInfo& tensor) const {
  return PartDataOffset(tensor.part) + tensor.offset;
}

void GgufFile::ReleasePages() const {
  file_.ReleasePages();
  for (const GgufFile& p : parts_) p.file_.ReleasePages();
}

std::span<const uint8_t> GgufFile::TensorData(const GgufTensorInfo& tensor) const {
  const GgufFile& f = tensor.part == 0 ? *this : parts_[tensor.part - 1];
  return f.bytes_.subspan(static_cast<size_t>(f.data_offset_ + tensor.offset),
                          static_cast<size_t>(tensor.size_bytes));
}

std::string GgufSplitName::PartName(uint32_t part_no) const {
  return absl::StrFormat("%s-%05d-of-%05d.gguf", prefix, part_no, count);
}

std::optional<GgufSplitName> ParseGgufSplitName(std::string_view filename) {
  constexpr std::string_view kOf = "-of-", kExt = ".gguf";
  constexpr size_t kTail = 1 + 5 + kOf.size() + 5 + kExt.size();  // "-00001-of-00003.gguf"
  if (filename.size() <= kTail) return std::nullopt;
  const std::string_view tail = filename.substr(filename.size() - kTail);
  auto number = [](std::string_view digits, uint32_t* out) {
    *out = 0;
    for (char c : digits) {
      if (c < '0' || c > '9') return false;
      *out = *out * 10 + static_cast<uint32_t>(c - '0');
    }
    return true;
  };
  GgufSplitName n;
  if (tail[0] != '-' || tail.substr(6, kOf.size()) != kOf || tail.substr(15) != kExt ||
      !number(tail.substr(1, 5), &n.no) || !number(tail.substr(10, 5), &n.count) || n.no == 0 ||
      n.no > n.count) {
    return std::nullopt;
  }
  n.prefix = std::string(filename.substr(0, filename.size() - kTail));
  return n;
}

bool HasGgufMagic(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

absl::StatusOr<GgufFile> GgufFile::OpenSplit(const std::filesystem::path& first) {
  ASSIGN_OR_RETURN(GgufFile file, Open(first));
  if (file.Find("split.count") == nullptr) return file;
  const std::string where = first.string();
  auto split_error = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("gguf split '", where, "': ", what));
  };
  ASSIGN_OR_RETURN(uint32_t count, file.GetU32("split.count"));
  const absl::StatusOr<uint32_t> no = file.GetU32("split.no");
  if (!no.ok() || *no != 0) {
    return split_error(absl::StrCat("this is part ", no.ok() ? *no + 1 : 0,
                                    ", not the first (-00001-of-", absl::StrFormat("%05d", count),
                                    ".gguf): pass the first part"));
  }
  if (count == 0 || count > 9999)
    return split_error(absl::StrCat("split.count ", count, " out of range"));
  // <prefix>-NNNNN-of-MMMMM.gguf
  const std::optional<GgufSplitName> name = ParseGgufSplitName(first.filename().string());
  if (!name || name->no != 1 || name->count != count) {
    return split_error(absl::StrCat("split.count is ", count, " but the name does not end in '",
                                    absl::StrFormat("-%05d-of-%05d.gguf", 1, count), "'"));
  }
  std::vector<std::string> missing;
  for (uint32_t i = 1; i < count; ++i) {
    const std::string part = name->PartName(i + 1);
    std::error_code ec;
    if (!std::filesystem::exists(first.parent_path() / part, ec)) missing.push_back(part);
  }
  if (!missing.empty()) {
    return absl::NotFoundError(absl::StrCat("gguf split '", where, "': ", missing.size(), " of ",
                                            count, " parts missing (", absl::StrJoin(missing, ", "),
                                            ") -- an unfinished download?"));
  }
  for (uint32_t i = 1; i < count; ++i) {
    const std::filesystem::path path = first.parent_path() / name->PartName(i + 1);
    auto part = Open(path);
    if (!part.ok())
      return split_error(
          absl::StrCat("part ", i + 1, " of ", count, ": ", part.status().message()));
    const absl::StatusOr<uint32_t> part_no = part->GetU32("split.no");
    if (!part_no.ok() || *part_no != i) {
      return split_error(absl::StrCat("'", path.filename().string(), "' says it is part ",
                                      part_no.ok() ? absl::StrCat(*part_no + 1) : "(no split.no)",
                                      ", expected ", i + 1));
    }
    for (GgufTensorInfo t : part->tensors_) {
      t.part = i;
      if (!file.tensor_index_.emplace(t.name, file.tensors_.size()).second) {
        return split_error(absl::StrCat("tensor '", t.name, "' is in two parts"));
      }
      file.tensors_.push_back(std::move(t));
    }
    file.parts_.push_back(std::move(*part));
  }
  if (auto total = file.GetU64("split.tensors.count");
      total.ok() && *total != file.tensors_.size()) {
    return split_error(absl::StrCat("split.tensors.count is ", *total, " but the parts hold ",
                                    file.tensors_.size(), " tensors"));
  }
  return file;
}

}  // namespace colibri::model
