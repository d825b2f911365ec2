#include "colibri/model/safetensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "colibri/quant/fp16.h"
#include "nlohmann/json.hpp"

namespace colibri::model {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // safetensors' own limit is 100 MB
constexpr size_t kMaxDims = 8;

struct DTypeInfo {
  const char* name;
  StDType dtype;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {"F32", StDType::kF32, 4},        {"F16", StDType::kF16, 2},   {"BF16", StDType::kBF16, 2},
    {"F8_E4M3", StDType::kF8E4M3, 1}, {"F64", StDType::kF64, 8},   {"I64", StDType::kI64, 8},
    {"I32", StDType::kI32, 4},        {"I16", StDType::kI16, 2},   {"I8", StDType::kI8, 1},
    {"U8", StDType::kU8, 1},          {"BOOL", StDType::kBool, 1},
};

}  // namespace

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(
    const std::filesystem::path& path) {
  ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::Open(path));
  std::span<const uint8_t> bytes = mapped.bytes();
  ASSIGN_OR_RETURN(auto file, Parse(bytes, path.string()));
  file->file_ = std::move(mapped);  // the mapping's address does not change on move
  return file;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Parse(
    std::span<const uint8_t> bytes, std::string_view label) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors '", std::string(label), "': ", why));
  };
  if (bytes.size() < 8) return bad("file shorter than its 8-byte header length");
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);  // little-endian on every supported host
  if (header_len > kMaxHeaderBytes)
    return bad(absl::StrCat("header length ", header_len, " exceeds 100 MB"));
  if (header_len > bytes.size() - 8) {
    return bad(absl::StrCat("header length ", header_len, " exceeds file size ", bytes.size()));
  }
  json header =
      json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<ptrdiff_t>(header_len),
                  nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return bad("header is not a JSON object");
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = bytes.size() - data_start;
  auto file = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  struct Range {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Range> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const json& info = it.value();
    const std::string ctx = absl::StrCat("tensor '", it.key(), "'");
    if (!info.is_object()) return bad(absl::StrCat(ctx, ": entry is not an object"));
    auto dt = info.find("dtype");
    auto sh = info.find("shape");
    auto off = info.find("data_offsets");
    if (dt == info.end() || !dt->is_string()) return bad(absl::StrCat(ctx, ": missing dtype"));
    if (sh == info.end() || !sh->is_array()) return bad(absl::StrCat(ctx, ": missing shape"));
    if (off == info.end() || !off->is_array() || off->size() != 2) {
      return bad(absl::StrCat(ctx, ": data_offsets must be [begin, end]"));
    }
    SafetensorsTensor t;
    t.name = it.key();
    t.dtype_name = dt->get<std::string>();
    size_t elem = 0;
    for (const auto& d : kDTypes) {
      if (t.dtype_name == d.name) {
        t.dtype = d.dtype;
        elem = d.size;
      }
    }
    if (elem == 0) return bad(absl::StrCat(ctx, ": unsupported dtype '", t.dtype_name, "'"));
    if (sh->size() > kMaxDims) return bad(absl::StrCat(ctx, ": too many dimensions"));
    uint64_t numel = 1;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned())
        return bad(absl::StrCat(ctx, ": shape entries must be non-negative integers"));
      uint64_t v = d.get<uint64_t>();
      if (v != 0 && numel > std::numeric_limits<uint64_t>::max() / v / elem) {
        return bad(absl::StrCat(ctx, ": shape overflows"));
      }
      numel *= v;
      t.shape.push_back(static_cast<int64_t>(v));
    }
    if (!(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned()) {
      return bad(absl::StrCat(ctx, ": data_offsets must be non-negative integers"));
    }
    uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      return bad(absl::StrCat(ctx, ": data_offsets [", begin, ", ", end,
                              ") outside the data section of ", data_size, " bytes"));
    }
    if (end - begin != numel * elem) {
      return bad(
          absl::StrCat(ctx, ": ", end - begin, " bytes but shape and dtype need ", numel * elem));
    }
    t.data = bytes.subspan(data_start + begin, end - begin);
    if (end > begin) ranges.push_back({begin, end, t.name});
    file->tensors_.emplace(t.name, std::move(t));
  }
  // Tensors must not share bytes (a view of one would alias another's data).
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].begin < ranges[i - 1].end) {
      return bad(absl::StrCat("tensors '", ranges[i - 1].name, "' and '", ranges[i].name,
                              "' overlap in the data section"));
    }
  }
  return file;
}

const SafetensorsTensor* SafetensorsFile::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::Open(
    const std::filesystem::path& dir) {
  auto ckpt = std::unique_ptr<SafetensorsCheckpoint>(new SafetensorsCheckpoint());
  ckpt->dir_ = dir;
  std::vector<std::string> shard_names;
  const auto index_path = dir / "model.safetensors.index.json";
  if (std::filesystem::exists(index_path)) {
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(index_path));
    json index = json::parse(text, nullptr, false);
    if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") ||
        !index["weight_map"].is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path.string(), ": no weight_map object"));
    }
    for (const auto& [name, file] : index["weight_map"].items()) {
      if (!file.is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(index_path.string(), ": weight_map['", name, "'] is not a string"));
      }
      std::string f = file.get<std::string>();
      if (f.find('/') != std::string::npos || f.find("..") != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat(index_path.string(), ": shard name '", f, "' is not a plain file name"));
      }
      if (std::find(shard_names.begin(), shard_names.end(), f) == shard_names.end())
        shard_names.push_back(f);
    }
  } else if (std::filesystem::exists(dir / "model.safetensors")) {
    shard_names.push_back("model.safetensors");
  } else {
    return absl::NotFoundError(absl::StrCat(
        "no model.safetensors or model.safetensors.index.json in '", dir.string(), "'"));
  }
  for (const auto& name : shard_names) {
    ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(dir / name));
    for (const auto& [tname, t] : file->tensors()) {
      if (!ckpt->index_.emplace(tname, &t).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", tname, "' appears in more than one shard of '", dir.string(), "'"));
      }
    }
    ckpt->files_.push_back(std::move(file));
  }
  return ckpt;
}

const SafetensorsTensor* SafetensorsCheckpoint::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

absl::StatusOr<const SafetensorsTensor*> SafetensorsCheckpoint::Get(const std::string& name) const {
  const SafetensorsTensor* t = Find(name);
  if (t == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("tensor '", name, "' not found in checkpoint '", dir_.string(), "'"));
  }
  return t;
}

std::vector<std::string> SafetensorsCheckpoint::Names() const {
  std::vector<std::string> names;
  for (const auto& [n, t] : index_) names.push_back(n);
  return names;
}

float Fp8E4M3ToF32(uint8_t b) {
  const int exp = (b >> 3) & 0xf, mant = b & 7;
  float v;
  if (exp == 0xf && mant == 7) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant) / 8.0f, -6);  // subnormal
  } else {
    v = std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, exp - 7);
  }
  return (b & 0x80) ? -v : v;
}

absl::StatusOr<std::vector<float>> TensorToFloat32(const SafetensorsTensor& t) {
  const size_t n = static_cast<size_t>(t.numel());
  std::vector<float> out(n);
  switch (t.dtype) {
    case StDType::kF32:
      if (n > 0)
        std::memcpy(out.data(), t.data.data(), n * 4);  // an empty tensor's data may be null
      break;
    case StDType::kF16:
    case StDType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data.data() + 2 * i, 2);
        out[i] = t.dtype == StDType::kF16 ? quant::F16ToF32(h) : quant::BF16ToF32(h);
      }
      break;
    case StDType::kF8E4M3:
      for (size_t i = 0; i < n; ++i) out[i] = Fp8E4M3ToF32(t.data[i]);
      break;
    default:
      return absl::FailedPreconditionError(
          absl::StrCat("tensor '", t.name, "': dtype ", t.dtype_name,
                       " cannot be converted to float (need F32, F16, BF16 or F8_E4M3)"));
  }
  return out;
}

}  // namespace colibri::model
