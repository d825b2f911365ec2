#include "colibri/model/manifest.h"

#include <filesystem>
#include <limits>

#include "absl/strings/str_cat.h"
#include "colibri/core/checksum.h"
#include "colibri/core/status.h"
#include "colibri/expert_source/expert_label.h"

namespace colibri::model {
namespace {

using nlohmann::json;

json TensorToJson(const TensorEntry& t, bool with_checksum) {
  json j{{"name", t.name},
         {"dtype", std::string(quant::DTypeName(t.dtype))},
         {"shape", t.shape},
         {"offset", t.offset},
         {"size", t.size}};
  if (with_checksum) j["checksum"] = ChecksumHex(t.checksum);
  return j;
}

absl::StatusOr<uint64_t> GetU64(const json& j, const char* key, const std::string& ctx) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer() ||
      (!it->is_number_unsigned() && it->get<int64_t>() < 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("manifest: ", ctx, ": '", key, "' must be a non-negative integer"));
  }
  return it->get<uint64_t>();
}

// An optional string member: `fallback` when absent, an error naming it when of another JSON
// type (json::value() would throw).
absl::StatusOr<std::string> GetString(const json& j, const char* key, const std::string& fallback,
                                      const std::string& ctx) {
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (!it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("manifest: ", ctx, ": '", key, "' must be a string"));
  }
  return it->get<std::string>();
}

absl::StatusOr<TensorEntry> TensorFromJson(const json& j, bool with_checksum,
                                           const std::string& ctx_in) {
  if (!j.is_object())
    return absl::InvalidArgumentError(absl::StrCat("manifest: ", ctx_in, ": not an object"));
  TensorEntry t;
  ASSIGN_OR_RETURN(t.name, GetString(j, "name", "", ctx_in));
  const std::string ctx = absl::StrCat(ctx_in, " tensor '", t.name, "'");
  if (t.name.empty())
    return absl::InvalidArgumentError(absl::StrCat("manifest: ", ctx, ": missing name"));
  ASSIGN_OR_RETURN(std::string dtype, GetString(j, "dtype", "", ctx));
  ASSIGN_OR_RETURN(t.dtype, quant::ParseDType(dtype));
  auto shape = j.find("shape");
  if (shape == j.end() || !shape->is_array() || shape->empty() || shape->size() > 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("manifest: ", ctx, ": shape must be a list of 1..4 dims"));
  }
  for (const auto& d : *shape) {
    if (!d.is_number_integer() || d.get<int64_t>() <= 0 || d.get<int64_t>() > (int64_t{1} << 32)) {
      return absl::InvalidArgumentError(absl::StrCat("manifest: ", ctx, ": bad dimension"));
    }
    t.shape.push_back(d.get<int64_t>());
  }
  ASSIGN_OR_RETURN(t.offset, GetU64(j, "offset", ctx));
  ASSIGN_OR_RETURN(t.size, GetU64(j, "size", ctx));
  // Size must equal rows * row bytes of the dtype.
  auto want = TensorByteSize(t.dtype, t.shape);
  if (!want.ok()) return Annotate(want.status(), absl::StrCat("manifest: ", ctx));
  if (*want != t.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "manifest: ", ctx, ": size ", t.size, " does not match shape and dtype (", *want, ")"));
  }
  if (t.offset > std::numeric_limits<uint64_t>::max() - t.size) {
    return absl::InvalidArgumentError(absl::StrCat("manifest: ", ctx, ": offset overflows"));
  }
  if (with_checksum) {
    ASSIGN_OR_RETURN(std::string checksum, GetString(j, "checksum", "", ctx));
    if (!ParseChecksumHex(checksum, &t.checksum)) {
      return absl::InvalidArgumentError(absl::StrCat("manifest: ", ctx, ": bad checksum"));
    }
  }
  return t;
}

}  // namespace

absl::Status CheckManifestPath(const std::string& field, const std::string& path) {
  auto bad = [&](const char* why) {
    return absl::InvalidArgumentError(
        absl::StrCat("manifest: ", field, " '", path, "': bad file name (", why,
                     "; model files stay inside the model directory)"));
  };
  if (path.empty()) return bad("empty");
  if (path.find('\0') != std::string::npos) return bad("a NUL byte");
  const std::filesystem::path p(path);
  if (p.is_absolute() || p.has_root_name() || p.has_root_directory())
    return bad("an absolute path");
  for (const auto& part : p) {
    if (part == "..") return bad("a '..' component");
  }
  return absl::OkStatus();
}

int64_t TensorEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const TensorEntry* ExpertBlock::Part(std::string_view name) const {
  for (const auto& p : parts) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

namespace {

const TensorEntry* FindByName(const std::vector<TensorEntry>& tensors, std::string_view name) {
  for (const auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

// A {"file", "size", "tensors"} section of checksummed tensors (dense, extra).
json TensorFileToJson(const std::string& file, uint64_t size,
                      const std::vector<TensorEntry>& tensors) {
  json list = json::array();
  for (const auto& t : tensors) list.push_back(TensorToJson(t, true));
  return json{{"file", file}, {"size", size}, {"tensors", list}};
}

absl::Status TensorFileFromJson(const json& section, const char* what, const char* default_file,
                                std::string* file, uint64_t* size,
                                std::vector<TensorEntry>* tensors) {
  if (!section.is_object())
    return absl::InvalidArgumentError(absl::StrCat("manifest: '", what, "' must be an object"));
  ASSIGN_OR_RETURN(*file, GetString(section, "file", default_file, what));
  RETURN_IF_ERROR(CheckManifestPath(absl::StrCat(what, ".file"), *file));
  ASSIGN_OR_RETURN(*size, GetU64(section, "size", what));
  if (!section.contains("tensors") || !section["tensors"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat("manifest: ", what, ".tensors must be a list"));
  }
  for (const auto& t : section["tensors"]) {
    ASSIGN_OR_RETURN(TensorEntry e, TensorFromJson(t, true, what));
    if (e.offset + e.size > *size) {
      return absl::InvalidArgumentError(
          absl::StrCat("manifest: ", what, " tensor '", e.name, "' lies outside ", *file));
    }
    if (FindByName(*tensors, e.name) != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("manifest: ", what, " tensor '", e.name, "' listed twice"));
    }
    tensors->push_back(std::move(e));
  }
  return absl::OkStatus();
}

}  // namespace

const TensorEntry* Manifest::FindDense(std::string_view name) const {
  return FindByName(dense, name);
}

const TensorEntry* Manifest::FindExtra(std::string_view name) const {
  return FindByName(extra, name);
}

uint64_t Manifest::TotalExpertBytes() const {
  uint64_t total = 0;
  for (const auto& b : experts) total += b.size;
  return total;
}

uint64_t Manifest::PaddedExpertBytes() const {
  uint64_t total = 0;
  for (const auto& b : experts) total += b.padded_size;
  return total;
}

absl::StatusOr<uint64_t> TensorByteSize(quant::DType dtype, const std::vector<int64_t>& shape) {
  if (shape.empty()) return absl::InvalidArgumentError("tensor has no shape");
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) {
    if (shape[i] < 0 || (shape[i] > 0 && rows > (int64_t{1} << 40) / shape[i]))
      return absl::InvalidArgumentError("shape overflows");
    rows *= shape[i];
  }
  ASSIGN_OR_RETURN(size_t row_bytes, quant::CheckedRowBytes(dtype, shape.back()));
  return static_cast<uint64_t>(rows) * row_bytes;
}

json ManifestToJson(const Manifest& m) {
  json blocks = json::array();
  for (const auto& b : m.experts) {
    json parts = json::array();
    for (const auto& p : b.parts) parts.push_back(TensorToJson(p, false));
    blocks.push_back(json{{"layer", b.id.layer},
                          {"expert", b.id.expert},
                          {"file", b.file},
                          {"offset", b.offset},
                          {"size", b.size},
                          {"padded_size", b.padded_size},
                          {"checksum", ChecksumHex(b.checksum)},
                          {"parts", parts}});
  }
  json j{{"format", "colibri-model"},
         {"version", m.version},
         {"name", m.name},
         {"config", ConfigToJson(m.config)},
         {"dense", TensorFileToJson(m.dense_file, m.dense_size, m.dense)},
         {"experts", json{{"block_alignment", kExpertBlockAlignment}, {"blocks", blocks}}},
         {"tokenizer", m.tokenizer},
         {"source", m.source}};
  if (!m.extra.empty()) j["extra"] = TensorFileToJson(m.extra_file, m.extra_size, m.extra);
  return j;
}

absl::StatusOr<Manifest> ManifestFromJson(const json& j) {
  if (!j.is_object() || !j.contains("format") || j["format"] != "colibri-model") {
    return absl::InvalidArgumentError(
        "manifest: not a colibri model manifest (format != colibri-model)");
  }
  Manifest m;
  auto version = j.find("version");
  if (version != j.end() && !version->is_number_integer()) {
    return absl::InvalidArgumentError("manifest: 'version' must be an integer");
  }
  m.version = version == j.end() ? 0 : version->get<int>();
  if (m.version != kContainerVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("manifest: container version ", m.version,
                     " is not supported (this build reads version ", kContainerVersion, ")"));
  }
  ASSIGN_OR_RETURN(m.name, GetString(j, "name", "", "top level"));
  if (!j.contains("config")) return absl::InvalidArgumentError("manifest: missing config");
  ASSIGN_OR_RETURN(m.config, ConfigFromJson(j["config"]));
  RETURN_IF_ERROR(TensorFileFromJson(j.value("dense", json::object()), "dense", "dense.bin",
                                     &m.dense_file, &m.dense_size, &m.dense));
  if (auto extra = j.find("extra"); extra != j.end()) {
    RETURN_IF_ERROR(
        TensorFileFromJson(*extra, "extra", "extra.bin", &m.extra_file, &m.extra_size, &m.extra));
    if (m.extra_file == m.dense_file) {
      return absl::InvalidArgumentError("manifest: extra.file must differ from dense.file");
    }
  }
  const json& experts = j.value("experts", json::object());
  if (!experts.contains("blocks") || !experts["blocks"].is_array()) {
    return absl::InvalidArgumentError("manifest: experts.blocks must be a list");
  }
  const int64_t n_blocks = m.config.n_moe_layers() * m.config.n_experts;
  if (static_cast<int64_t>(experts["blocks"].size()) != n_blocks) {
    return absl::InvalidArgumentError(absl::StrCat("manifest: ", experts["blocks"].size(),
                                                   " expert blocks, expected ", n_blocks,
                                                   " (MoE layers x experts)"));
  }
  m.experts.resize(static_cast<size_t>(n_blocks));
  std::vector<bool> seen(static_cast<size_t>(n_blocks), false);
  for (const auto& bj : experts["blocks"]) {
    if (!bj.is_object())
      return absl::InvalidArgumentError("manifest: expert block is not an object");
    ExpertBlock b;
    ASSIGN_OR_RETURN(uint64_t layer, GetU64(bj, "layer", "expert block"));
    ASSIGN_OR_RETURN(uint64_t expert, GetU64(bj, "expert", "expert block"));
    const std::string ctx = ExpertLabel(layer, expert);
    if (layer >= static_cast<uint64_t>(m.config.n_layers) ||
        expert >= static_cast<uint64_t>(m.config.n_experts) ||
        !m.config.IsMoeLayer(static_cast<int64_t>(layer))) {
      return absl::InvalidArgumentError(
          absl::StrCat("manifest: ", ctx, " out of range (or in a dense layer)"));
    }
    // In range of the config's bounds (checked above), so both fit the id's int32 fields.
    b.id = {static_cast<int32_t>(layer), static_cast<int32_t>(expert)};
    ASSIGN_OR_RETURN(b.file, GetString(bj, "file", "", ctx));
    RETURN_IF_ERROR(CheckManifestPath(absl::StrCat(ctx, ".file"), b.file));
    ASSIGN_OR_RETURN(b.offset, GetU64(bj, "offset", ctx));
    ASSIGN_OR_RETURN(b.size, GetU64(bj, "size", ctx));
    ASSIGN_OR_RETURN(b.padded_size, GetU64(bj, "padded_size", ctx));
    if (b.offset % kExpertBlockAlignment != 0 || b.padded_size % kExpertBlockAlignment != 0 ||
        b.padded_size < b.size || b.padded_size - b.size >= kExpertBlockAlignment ||
        b.offset > std::numeric_limits<uint64_t>::max() - b.padded_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("manifest: ", ctx, ": misaligned or inconsistent offset/size"));
    }
    ASSIGN_OR_RETURN(std::string checksum, GetString(bj, "checksum", "", ctx));
    if (!ParseChecksumHex(checksum, &b.checksum)) {
      return absl::InvalidArgumentError(absl::StrCat("manifest: ", ctx, ": bad checksum"));
    }
    if (!bj.contains("parts") || !bj["parts"].is_array()) {
      return absl::InvalidArgumentError(absl::StrCat("manifest: ", ctx, ": missing parts"));
    }
    for (const auto& pj : bj["parts"]) {
      ASSIGN_OR_RETURN(TensorEntry p, TensorFromJson(pj, false, ctx));
      if (p.offset + p.size > b.size) {
        return absl::InvalidArgumentError(
            absl::StrCat("manifest: ", ctx, " part '", p.name, "' lies outside the block"));
      }
      b.parts.push_back(std::move(p));
    }
    for (const char* part : {"gate", "up", "down"}) {
      if (b.Part(part) == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("manifest: ", ctx, ": missing part '", part, "'"));
      }
    }
    const size_t idx = m.ExpertIndex(b.id);
    if (seen[idx])
      return absl::InvalidArgumentError(absl::StrCat("manifest: ", ctx, " listed twice"));
    seen[idx] = true;
    m.experts[idx] = std::move(b);
  }
  m.tokenizer = j.value("tokenizer", json::object());
  if (!m.tokenizer.is_object())
    return absl::InvalidArgumentError("manifest: 'tokenizer' must be an object");
  if (auto files = m.tokenizer.find("files"); files != m.tokenizer.end()) {
    if (!files->is_array())
      return absl::InvalidArgumentError("manifest: tokenizer.files must be a list");
    for (size_t i = 0; i < files->size(); ++i) {
      const std::string field = absl::StrCat("tokenizer.files[", i, "]");
      if (!(*files)[i].is_string())
        return absl::InvalidArgumentError(absl::StrCat("manifest: ", field, " must be a string"));
      RETURN_IF_ERROR(CheckManifestPath(field, (*files)[i].get<std::string>()));
    }
  }
  m.source = j.value("source", json::object());
  return m;
}

}  // namespace colibri::model
