#include "gguf_in_place.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "colibri/core/checksum.h"
#include "colibri/core/status.h"
#include "colibri/core/units.h"
#include "colibri/expert_source/expert_label.h"
#include "colibri/model/convert.h"
#include "spdlog/spdlog.h"
#include "tensor_sink.h"

namespace colibri::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kChecksumsFile[] = "checksums.json";
constexpr char kChecksumsFormat[] = "colibri-gguf-checksums";
// Recorded sums are written at most this often while serving (and always at exit).
constexpr auto kFlushInterval = std::chrono::seconds(10);

// The model's name: the file name without ".gguf" and any split suffix.
std::string ModelName(const fs::path& first) {
  if (auto split = ParseGgufSplitName(first.filename().string())) return split->prefix;
  return first.stem().string();
}

bool Writable(const fs::path& dir) { return ::access(dir.c_str(), W_OK | X_OK) == 0; }

// Beside the file when its directory is writable, else under the user's cache directory.
fs::path StateDir(const fs::path& first, const std::string& name) {
  std::error_code ec;
  const fs::path beside = first.parent_path() / (name + ".colibri");
  if (fs::is_directory(beside, ec) ? Writable(beside) : Writable(first.parent_path())) {
    fs::create_directories(beside, ec);
    if (!ec) return beside;
  }
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  fs::path cache = xdg != nullptr && *xdg != '\0'     ? fs::path(xdg)
                   : home != nullptr && *home != '\0' ? fs::path(home) / ".cache"
                                                      : fs::path();
  if (cache.empty()) return {};
  const std::string abs = fs::absolute(first, ec).string();
  const fs::path dir = cache / "colibri" / "gguf" /
                       absl::StrCat(name, "-", ChecksumHex(Checksum64(abs.data(), abs.size())));
  fs::create_directories(dir, ec);
  return ec ? fs::path() : dir;
}

// Each part's size, modification time and header checksum: what makes recorded sums valid.
json Identity(const GgufFile& f) {
  json parts = json::array();
  for (uint32_t i = 0; i < f.parts(); ++i) {
    struct stat st {};
    const fs::path& p = f.PartPath(i);
    const int64_t mtime_ns =
        ::stat(p.c_str(), &st) == 0
            ? static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec
            : 0;
    // The header is everything before the tensor data: metadata, tensor names, types, offsets.
    const std::span<const uint8_t> bytes = f.PartBytes(i);
    const std::span<const uint8_t> header =
        bytes.first(std::min<uint64_t>(f.PartDataOffset(i), bytes.size()));
    const uint64_t header_checksum = Checksum64(header.data(), header.size());
    parts.push_back({{"file", p.filename().string()},
                     {"size", f.PartSize(i)},
                     {"mtime_ns", mtime_ns},
                     {"header", ChecksumHex(header_checksum)}});
  }
  return parts;
}

// Plans the manifest: offsets of dense and extra tensors in memory, and the ranges of every
// expert block in the files. Reads no tensor bytes.
class PlanSink final : public TensorSink {
 public:
  PlanSink(const GgufFile& f, Manifest* m) : f_(f), m_(*m) {}

  absl::Status Dense(const std::string& name, quant::DType dtype, std::vector<int64_t> shape,
                     const Bytes&) override {
    return Add(&m_.dense, &m_.dense_size, "dense", name, dtype, std::move(shape));
  }
  absl::Status Extra(const std::string& name, quant::DType dtype, std::vector<int64_t> shape,
                     const Bytes&) override {
    return Add(&m_.extra, &m_.extra_size, "extra", name, dtype, std::move(shape));
  }
  absl::Status Expert(int64_t layer, int64_t expert,
                      const std::vector<ExpertPart>& parts) override {
    if (!m_.HasExpert(layer, expert)) {
      return absl::InvalidArgumentError(
          absl::StrCat("gguf: ", ExpertLabel(layer, expert), " outside the model"));
    }
    ExpertBlock b;
    b.id = {static_cast<int32_t>(layer), static_cast<int32_t>(expert)};
    b.checksum_known = false;
    uint64_t at = 0;
    for (const ExpertPart& p : parts) {
      const GgufTensorInfo& t = *p.source;
      if (p.dtype != t.type) {
        return absl::FailedPreconditionError(absl::StrCat(
            "gguf: '", t.name, "' is stored as ", std::string(quant::DTypeName(t.type)),
            " and the engine needs its expert rows as ", std::string(quant::DTypeName(p.dtype)),
            ": this file cannot be served in place; convert it (colibri-convert)"));
      }
      const uint64_t slab = t.size_bytes / static_cast<uint64_t>(p.count);
      const uint64_t start = f_.TensorFileOffset(t) + slab * static_cast<uint64_t>(p.index);
      const uint64_t first = start / kExpertBlockAlignment * kExpertBlockAlignment;
      const uint64_t end = AlignUp(start + slab, kExpertBlockAlignment);
      TensorEntry e;
      e.name = p.name;
      e.dtype = p.dtype;
      e.shape = p.shape;
      e.offset = at + (start - first);
      e.size = slab;
      auto part_bytes = TensorByteSize(p.dtype, p.shape);
      if (!part_bytes.ok())
        return Annotate(part_bytes.status(), absl::StrCat("gguf: '", t.name, "'"));
      if (*part_bytes != slab) {
        return absl::InvalidArgumentError(
            absl::StrCat("gguf: '", t.name, "': ", t.size_bytes, " bytes do not split into ",
                         p.count, " experts of shape [", absl::StrJoin(p.shape, ", "), "]"));
      }
      b.parts.push_back(std::move(e));
      b.ranges.push_back(
          {f_.PartPath(t.part).filename().string(), first, end - first, at, start + slab - first});
      at += end - first;
    }
    b.file = b.ranges.front().file;
    b.offset = b.ranges.front().offset;
    b.size = b.padded_size = at;
    m_.experts[m_.ExpertIndex(layer, expert)] = std::move(b);
    return absl::OkStatus();
  }

 private:
  absl::Status Add(std::vector<TensorEntry>* list, uint64_t* size, const char* what,
                   const std::string& name, quant::DType dtype, std::vector<int64_t> shape) {
    TensorEntry e;
    e.name = name;
    e.dtype = dtype;
    auto bytes = TensorByteSize(dtype, shape);
    if (!bytes.ok())
      return Annotate(bytes.status(), absl::StrCat("gguf: ", what, " tensor '", name, "'"));
    e.size = *bytes;
    e.shape = std::move(shape);
    e.offset = AlignUp(*size, kDenseAlignment);
    *size = e.offset + e.size;
    list->push_back(std::move(e));
    return absl::OkStatus();
  }

  const GgufFile& f_;
  Manifest& m_;
};

// Converts the dense tensors into their planned places.
class DenseSink final : public TensorSink {
 public:
  DenseSink(const GgufFile& f, const Manifest& m, uint8_t* buffer) : f_(f), m_(m), out_(buffer) {}

  absl::Status Dense(const std::string& name, quant::DType, std::vector<int64_t>,
                     const Bytes& bytes) override {
    const TensorEntry* e = m_.FindDense(name);
    ASSIGN_OR_RETURN(const std::vector<uint8_t> v, bytes());
    if (e == nullptr || v.size() != e->size) {
      return absl::InternalError(
          absl::StrCat("gguf in place: dense tensor '", name, "' differs from its plan"));
    }
    std::memcpy(out_ + e->offset, v.data(), v.size());
    // The mapped source pages would otherwise count a second time in resident memory.
    since_release_ += v.size();
    if (since_release_ >= (uint64_t{256} << 20)) {
      f_.ReleasePages();
      since_release_ = 0;
    }
    return absl::OkStatus();
  }
  absl::Status Extra(const std::string&, quant::DType, std::vector<int64_t>,
                     const Bytes&) override {
    return absl::OkStatus();
  }
  absl::Status Expert(int64_t, int64_t, const std::vector<ExpertPart>&) override {
    return absl::OkStatus();
  }

 private:
  const GgufFile& f_;
  const Manifest& m_;
  uint8_t* out_;
  uint64_t since_release_ = 0;
};

// Captures one extra tensor.
class ExtraSink final : public TensorSink {
 public:
  explicit ExtraSink(std::string_view name) : name_(name) {}
  absl::Status Dense(const std::string&, quant::DType, std::vector<int64_t>,
                     const Bytes&) override {
    return absl::OkStatus();
  }
  absl::Status Extra(const std::string& name, quant::DType, std::vector<int64_t>,
                     const Bytes& bytes) override {
    if (name != name_) return absl::OkStatus();
    ASSIGN_OR_RETURN(bytes_, bytes());
    return absl::OkStatus();
  }
  absl::Status Expert(int64_t, int64_t, const std::vector<ExpertPart>&) override {
    return absl::OkStatus();
  }
  std::optional<std::vector<uint8_t>>& bytes() { return bytes_; }

 private:
  std::string name_;
  std::optional<std::vector<uint8_t>> bytes_;
};

}  // namespace

absl::StatusOr<Manifest> PlanGgufInPlace(const GgufFile& f, const std::string& name) {
  ASSIGN_OR_RETURN(ModelConfig config, ConfigFromGguf(f));
  ASSIGN_OR_RETURN(QuantPlan plan, QuantPlan::Parse("keep", config));
  Manifest m;
  m.name = name;
  m.config = config;
  const std::string file = f.PartPath(0).filename().string();
  m.dense_file = m.extra_file = file;
  m.experts.resize(static_cast<size_t>(config.n_moe_layers() * config.n_experts));
  PlanSink plan_sink(f, &m);
  RETURN_IF_ERROR(WalkGguf(f, config, plan, plan_sink, {}));
  for (const ExpertBlock& b : m.experts) {
    if (b.ranges.empty()) return absl::InternalError("gguf in place: a block was not planned");
  }
  m.tokenizer = {{"files", json::array({file})},
                 {"model", std::string(f.GetString("tokenizer.ggml.model").value_or(""))}};
  return m;
}

absl::StatusOr<std::unique_ptr<GgufInPlace>> GgufInPlace::Open(const fs::path& first,
                                                               Manifest* manifest) {
  ASSIGN_OR_RETURN(GgufFile f, GgufFile::OpenSplit(first));
  auto planned = PlanGgufInPlace(f, ModelName(first));
  if (!planned.ok()) return Annotate(planned.status(), first.string());
  ASSIGN_OR_RETURN(QuantPlan plan, QuantPlan::Parse("keep", planned->config));
  auto g = std::unique_ptr<GgufInPlace>(new GgufInPlace(std::move(f), std::move(plan)));
  Manifest& m = *manifest;
  m = *std::move(planned);
  g->config_ = m.config;
  g->first_ = first;
  g->identity_ = Identity(g->file_);
  std::error_code ec;
  m.source = {{"format", "gguf"},
              {"in_place", true},
              {"path", fs::absolute(first, ec).string()},
              {"gguf_version", g->file_.version()},
              {"parts", g->identity_}};
  g->state_dir_ = StateDir(first, m.name);
  g->recorded_.assign(m.experts.size(), 0);
  g->has_.assign(m.experts.size(), 0);
  g->LoadRecorded(&m);
  return g;
}

GgufInPlace::~GgufInPlace() {
  std::lock_guard<std::mutex> lock(mu_);
  if (unsaved_ > 0) {
    if (auto st = FlushLocked(); !st.ok())
      spdlog::warn("gguf in place: recorded checksums not saved: {}", st.ToString());
  }
}

void GgufInPlace::LoadRecorded(Manifest* m) {
  if (state_dir_.empty()) return;
  const fs::path path = state_dir_ / kChecksumsFile;
  std::error_code ec;
  if (!fs::exists(path, ec)) return;
  auto text = ReadFileToString(path);
  json j = text.ok() ? json::parse(*text, nullptr, false) : json();
  auto ignore = [&](const std::string& why) {
    spdlog::warn("gguf in place: {}: {}; checksums are recorded anew", path.string(), why);
  };
  if (!j.is_object() || j.value("format", "") != kChecksumsFormat || !j.contains("experts") ||
      !j["experts"].is_array()) {
    return ignore("not a checksum file");
  }
  if (j.value("identity", json()) != identity_) {
    return ignore("the GGUF changed since they were recorded (size, time or header)");
  }
  if (j.contains("dense") && j["dense"].is_string()) {
    uint64_t d = 0;
    if (ParseChecksumHex(j["dense"].get<std::string>(), &d)) dense_checksum_ = d;
  }
  size_t n = 0;
  for (const json& e : j["experts"]) {
    uint64_t sum = 0;
    if (!e.is_array() || e.size() != 3 || !e[0].is_number_integer() || !e[1].is_number_integer() ||
        !e[2].is_string() || !ParseChecksumHex(e[2].get<std::string>(), &sum)) {
      return ignore("malformed entry");
    }
    const int64_t layer = e[0].get<int64_t>(), expert = e[1].get<int64_t>();
    if (!m->HasExpert(layer, expert)) return ignore("an entry outside the model");
    ExpertBlock& b = m->experts[m->ExpertIndex(layer, expert)];
    b.checksum = sum;
    b.checksum_known = true;
    recorded_[m->ExpertIndex(layer, expert)] = sum;
    has_[m->ExpertIndex(layer, expert)] = 1;
    ++n;
  }
  spdlog::info("gguf in place: {} of {} expert checksums recorded earlier ({})", n,
               m->experts.size(), path.string());
}

absl::Status GgufInPlace::FlushLocked() {
  if (state_dir_.empty()) {
    if (!warned_unsaved_) {
      spdlog::warn(
          "gguf in place: no writable directory beside '{}' or in the cache directory: "
          "expert checksums are checked within this run only",
          first_.string());
      warned_unsaved_ = true;
    }
    unsaved_ = 0;
    return absl::OkStatus();
  }
  json experts = json::array();
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    if (!config_.IsMoeLayer(l)) continue;
    for (int64_t e = 0; e < config_.n_experts; ++e) {
      const size_t i = static_cast<size_t>(config_.MoeLayerRank(l) * config_.n_experts + e);
      if (has_[i]) experts.push_back(json::array({l, e, ChecksumHex(recorded_[i])}));
    }
  }
  json j = {{"format", kChecksumsFormat},
            {"version", 1},
            {"identity", identity_},
            {"experts", std::move(experts)}};
  if (dense_checksum_) j["dense"] = ChecksumHex(*dense_checksum_);
  RETURN_IF_ERROR(WriteFileAtomic(state_dir_ / kChecksumsFile, j.dump()));
  unsaved_ = 0;
  last_flush_ = std::chrono::steady_clock::now();
  return absl::OkStatus();
}

absl::Status GgufInPlace::Flush() {
  std::lock_guard<std::mutex> lock(mu_);
  return FlushLocked();
}

absl::Status GgufInPlace::Record(const Manifest& m, const ExpertBlock& b, uint64_t got,
                                 std::string_view where) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t i = m.ExpertIndex(b.id);
  if (has_[i]) {
    if (recorded_[i] == got) return absl::OkStatus();
    return absl::DataLossError(absl::StrCat(ExpertLabel(b.id), " in ", std::string(where),
                                            ": its bytes changed since they were first "
                                            "read (recorded ",
                                            ChecksumHex(recorded_[i]), ", read ", ChecksumHex(got),
                                            "): the GGUF was modified while being served"));
  }
  recorded_[i] = got;
  has_[i] = 1;
  if (++unsaved_ >= 1024 || std::chrono::steady_clock::now() - last_flush_ >= kFlushInterval) {
    if (auto st = FlushLocked(); !st.ok()) {
      spdlog::warn("gguf in place: recorded checksums not saved: {}", st.ToString());
      unsaved_ = 0;
      last_flush_ = std::chrono::steady_clock::now();
    }
  }
  return absl::OkStatus();
}

absl::Status GgufInPlace::LoadDense(const Manifest& m, uint8_t* buffer) {
  DenseSink sink(file_, m, buffer);
  RETURN_IF_ERROR(WalkGguf(file_, config_, plan_, sink, {}));
  file_.ReleasePages();
  const uint64_t got = Checksum64(buffer, m.dense_size);
  std::lock_guard<std::mutex> lock(mu_);
  if (dense_checksum_ && *dense_checksum_ != got) {
    return absl::DataLossError(absl::StrCat(
        "dense weights of '", first_.string(), "' changed since they were first loaded (recorded ",
        ChecksumHex(*dense_checksum_), ", read ", ChecksumHex(got), ")"));
  }
  if (!dense_checksum_) {
    dense_checksum_ = got;
    RETURN_IF_ERROR(FlushLocked());
  }
  return absl::OkStatus();
}

absl::StatusOr<AlignedBytes> GgufInPlace::ReadExtra(const TensorEntry& entry) const {
  ExtraSink sink(entry.name);
  RETURN_IF_ERROR(WalkGguf(file_, config_, plan_, sink, {}));
  if (!sink.bytes() || sink.bytes()->size() != entry.size) {
    return absl::InternalError(
        absl::StrCat("gguf in place: extra tensor '", entry.name, "' differs from its plan"));
  }
  ASSIGN_OR_RETURN(AlignedBytes buf, AllocateAligned(std::max<uint64_t>(entry.size, 1), 64));
  std::memcpy(buf.get(), sink.bytes()->data(), entry.size);
  return buf;
}

}  // namespace colibri::model
