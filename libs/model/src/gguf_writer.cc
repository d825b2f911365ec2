#include "colibri/model/gguf_writer.h"

#include <bit>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "colibri/core/file_util.h"
#include "colibri/core/status.h"

namespace colibri::model {
namespace {

template <typename T>
void Put(std::vector<uint8_t>* out, T v) {
  const size_t at = out->size();
  out->resize(at + sizeof(T));
  std::memcpy(out->data() + at, &v, sizeof(T));
}

void PutString(std::vector<uint8_t>* out, std::string_view s) {
  Put<uint64_t>(out, s.size());
  out->insert(out->end(), s.begin(), s.end());
}

void PadTo(std::vector<uint8_t>* out, uint64_t alignment) {
  out->resize((out->size() + alignment - 1) / alignment * alignment, 0);
}

}  // namespace

GgufWriteValue GgufWriteValue::Int(GgufType t, uint64_t bits) {
  GgufWriteValue v;
  v.type_ = t;
  v.bits_ = bits;
  return v;
}

GgufWriteValue GgufWriteValue::Float32(float f) {
  GgufWriteValue v;
  v.type_ = GgufType::kFloat32;
  v.float_ = f;
  return v;
}

GgufWriteValue GgufWriteValue::Float64(double f) {
  GgufWriteValue v;
  v.type_ = GgufType::kFloat64;
  v.float_ = f;
  return v;
}

GgufWriteValue GgufWriteValue::String(std::string s) {
  GgufWriteValue v;
  v.type_ = GgufType::kString;
  v.string_ = std::move(s);
  return v;
}

GgufWriteValue GgufWriteValue::Array(GgufType element_type, std::vector<GgufWriteValue> elements) {
  GgufWriteValue v;
  v.type_ = GgufType::kArray;
  v.element_type_ = element_type;
  v.elements_ = std::move(elements);
  return v;
}

GgufWriteValue GgufWriteValue::StringArray(const std::vector<std::string>& strings) {
  std::vector<GgufWriteValue> elements;
  elements.reserve(strings.size());
  for (const std::string& s : strings) elements.push_back(String(s));
  return Array(GgufType::kString, std::move(elements));
}

GgufWriteValue GgufWriteValue::Float32Array(std::span<const float> values) {
  std::vector<GgufWriteValue> elements;
  elements.reserve(values.size());
  for (float f : values) elements.push_back(Float32(f));
  return Array(GgufType::kFloat32, std::move(elements));
}

GgufWriteValue GgufWriteValue::Int32Array(std::span<const int32_t> values) {
  std::vector<GgufWriteValue> elements;
  elements.reserve(values.size());
  for (int32_t x : values) elements.push_back(Int32(x));
  return Array(GgufType::kInt32, std::move(elements));
}

void GgufWriteValue::AppendPayload(std::vector<uint8_t>* out) const {
  switch (type_) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool: Put<uint8_t>(out, static_cast<uint8_t>(bits_)); return;
    case GgufType::kUint16:
    case GgufType::kInt16: Put<uint16_t>(out, static_cast<uint16_t>(bits_)); return;
    case GgufType::kUint32:
    case GgufType::kInt32: Put<uint32_t>(out, static_cast<uint32_t>(bits_)); return;
    case GgufType::kUint64:
    case GgufType::kInt64: Put<uint64_t>(out, bits_); return;
    case GgufType::kFloat32: Put<float>(out, static_cast<float>(float_)); return;
    case GgufType::kFloat64: Put<double>(out, float_); return;
    case GgufType::kString: PutString(out, string_); return;
    case GgufType::kArray:
      Put<uint32_t>(out, static_cast<uint32_t>(element_type_));
      Put<uint64_t>(out, elements_.size());
      for (const GgufWriteValue& e : elements_) e.AppendPayload(out);
      return;
  }
}

GgufWriter::GgufWriter(Options options) : options_(options) {}

absl::Status GgufWriter::Add(std::string key, GgufWriteValue value) {
  for (const auto& [k, v] : metadata_) {
    if (k == key) {
      return absl::InvalidArgumentError(absl::StrCat("gguf writer: duplicate key '", key, "'"));
    }
  }
  // Arrays must be homogeneous, recursively.
  std::vector<const GgufWriteValue*> pending = {&value};
  while (!pending.empty()) {
    const GgufWriteValue* v = pending.back();
    pending.pop_back();
    if (v->type_ != GgufType::kArray) continue;
    for (const GgufWriteValue& e : v->elements_) {
      if (e.type_ != v->element_type_) {
        return absl::InvalidArgumentError(
            absl::StrCat("gguf writer: key '", key, "': element of type ", GgufTypeName(e.type_),
                         " in an array of ", GgufTypeName(v->element_type_)));
      }
      pending.push_back(&e);
    }
  }
  metadata_.emplace_back(std::move(key), std::move(value));
  return absl::OkStatus();
}

absl::Status GgufWriter::AddTensor(std::string name, std::vector<int64_t> dims, quant::DType type,
                                   std::span<const uint8_t> data) {
  const std::string what = absl::StrCat("gguf writer: tensor '", name, "'");
  for (const Tensor& t : tensors_) {
    if (t.info.name == name) return absl::InvalidArgumentError(absl::StrCat(what, ": duplicate"));
  }
  if (dims.size() > 4) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", dims.size(), " dims (at most 4)"));
  }
  uint64_t rows = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0) return absl::InvalidArgumentError(absl::StrCat(what, ": negative dim"));
    if (i > 0) rows *= static_cast<uint64_t>(dims[i]);
  }
  const int64_t row_elems = dims.empty() ? 1 : dims[0];
  auto row_bytes = quant::CheckedRowBytes(type, row_elems);
  if (!row_bytes.ok()) return Annotate(row_bytes.status(), what);
  if (*row_bytes * rows != data.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", data.size(), " bytes given, ", *row_bytes * rows, " expected"));
  }
  Tensor t;
  t.info.name = std::move(name);
  for (int64_t d : dims) t.info.dims.push_back(static_cast<uint64_t>(d));
  t.info.type_id = static_cast<uint32_t>(type);
  t.info.offset = data_size_;
  t.data.assign(data.begin(), data.end());
  const uint64_t align = options_.alignment == 0 ? 1 : options_.alignment;
  data_size_ += (data.size() + align - 1) / align * align;
  tensors_.push_back(std::move(t));
  return absl::OkStatus();
}

void GgufWriter::AddRawTensorInfo(RawTensorInfo info) {
  Tensor t;
  t.info = std::move(info);
  t.raw = true;
  tensors_.push_back(std::move(t));
}

absl::StatusOr<std::vector<uint8_t>> GgufWriter::Serialize() const {
  if (options_.version != 2 && options_.version != 3) {
    return absl::InvalidArgumentError(absl::StrCat("gguf writer: version ", options_.version));
  }
  if (options_.alignment == 0 || !std::has_single_bit(options_.alignment)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gguf writer: alignment ", options_.alignment, " is not a power of two"));
  }
  bool has_alignment_key = false;
  for (const auto& [k, v] : metadata_) has_alignment_key |= (k == "general.alignment");
  const bool add_alignment_key = !has_alignment_key && options_.alignment != 32;

  std::vector<uint8_t> out = {'G', 'G', 'U', 'F'};
  Put<uint32_t>(&out, options_.version);
  Put<uint64_t>(&out, tensors_.size());
  Put<uint64_t>(&out, metadata_.size() + (add_alignment_key ? 1 : 0));
  if (add_alignment_key) {
    PutString(&out, "general.alignment");
    Put<uint32_t>(&out, static_cast<uint32_t>(GgufType::kUint32));
    Put<uint32_t>(&out, options_.alignment);
  }
  for (const auto& [k, v] : metadata_) {
    PutString(&out, k);
    Put<uint32_t>(&out, static_cast<uint32_t>(v.type()));
    v.AppendPayload(&out);
  }
  for (const Tensor& t : tensors_) {
    PutString(&out, t.info.name);
    Put<uint32_t>(&out, static_cast<uint32_t>(t.info.dims.size()));
    for (uint64_t d : t.info.dims) Put<uint64_t>(&out, d);
    Put<uint32_t>(&out, t.info.type_id);
    Put<uint64_t>(&out, t.info.offset);
  }
  PadTo(&out, options_.alignment);
  for (const Tensor& t : tensors_) {
    if (t.raw) continue;
    out.insert(out.end(), t.data.begin(), t.data.end());
    PadTo(&out, options_.alignment);
  }
  return out;
}

absl::Status GgufWriter::WriteFile(const std::filesystem::path& path) const {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, Serialize());
  return WriteFileAtomic(
      path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

}  // namespace colibri::model
