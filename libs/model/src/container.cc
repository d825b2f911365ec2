#include "colibri/model/container.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "colibri/core/checksum.h"
#include "colibri/core/status.h"
#include "colibri/core/thread_pool.h"
#include "colibri/core/units.h"
#include "colibri/expert_source/expert_label.h"
#include "colibri/model/gguf_reader.h"
#include "gguf_in_place.h"
#include "nlohmann/json.hpp"

namespace colibri::model {

namespace fs = std::filesystem;

TensorView ViewOf(const TensorEntry& entry, const uint8_t* base) {
  TensorView v;
  v.dtype = entry.dtype;
  v.cols = entry.cols();
  v.rows = entry.cols() == 0 ? 0 : entry.numel() / entry.cols();
  v.data = base + entry.offset;
  v.size = entry.size;
  return v;
}

ExpertWeights ExpertWeightsOf(const ExpertBlock& block, const uint8_t* block_data) {
  ExpertWeights w{ViewOf(*block.Part("gate"), block_data), ViewOf(*block.Part("up"), block_data),
                  ViewOf(*block.Part("down"), block_data)};
  if (const TensorEntry* p = block.Part("gate_bias")) w.gate_bias = ViewOf(*p, block_data);
  if (const TensorEntry* p = block.Part("up_bias")) w.up_bias = ViewOf(*p, block_data);
  if (const TensorEntry* p = block.Part("down_bias")) w.down_bias = ViewOf(*p, block_data);
  return w;
}

absl::Status ExpertChecksumError(const ExpertBlock& block, const std::string& where, uint64_t got) {
  return absl::DataLossError(absl::StrCat(ExpertLabel(block.id), " in ", where, " at offset ",
                                          block.offset, ": checksum mismatch (manifest ",
                                          ChecksumHex(block.checksum), ", read ", ChecksumHex(got),
                                          ")"));
}

// ---------------------------------------------------------------------------------------------
// Writer

// Writes experts.bin: whole 4 KiB-padded blocks from aligned buffers with O_DIRECT (buffered
// writes spent half a conversion's time copying into the page cache), on a thread of its own so
// the next blocks are read and assembled meanwhile; at most kInFlight bytes queued. One fsync at
// the end. Falls back to buffered writes where O_DIRECT is refused.
class ContainerWriter::BlockWriter {
 public:
  static constexpr uint64_t kInFlight = uint64_t{256} << 20;

  static absl::StatusOr<std::unique_ptr<BlockWriter>> Create(const fs::path& path) {
    auto w = std::unique_ptr<BlockWriter>(new BlockWriter());
    w->path_ = path;
    w->fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd_ < 0) return ErrnoStatus(errno, "create", path);
    w->direct_fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_DIRECT);
    w->thread_ = std::thread([p = w.get()] { p->Run(); });
    return w;
  }
  ~BlockWriter() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    if (direct_fd_ >= 0) ::close(direct_fd_);
    if (fd_ >= 0) ::close(fd_);
  }

  struct Buffer {
    AlignedBytes bytes;
    uint64_t capacity = 0;
  };

  // Queues `size` bytes (a multiple of 4 KiB) of `buffer` for `offset`; the first write error.
  absl::Status Write(Buffer buffer, uint64_t size, uint64_t offset) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return queued_bytes_ + size <= kInFlight || queue_.empty(); });
    if (!error_.ok()) return error_;
    queue_.push_back({std::move(buffer), size, offset});
    queued_bytes_ += size;
    cv_.notify_all();
    return absl::OkStatus();
  }
  // A buffer of at least `size` bytes (4 KiB aligned, contents undefined): one a finished write
  // gave back when there is one, so steady state allocates (and faults in) nothing.
  absl::StatusOr<Buffer> Take(uint64_t size) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (it->capacity >= size) {
          Buffer b = std::move(*it);
          free_.erase(it);
          free_bytes_ -= b.capacity;
          return b;
        }
      }
    }
    ASSIGN_OR_RETURN(AlignedBytes bytes, AllocateAligned(size, 4096, /*zero=*/false));
    return Buffer{std::move(bytes), size};
  }
  // Keeps a buffer for reuse (up to kInFlight bytes of them).
  void Give(Buffer buffer) {
    std::lock_guard<std::mutex> lock(mu_);
    GiveLocked(std::move(buffer));
  }
  // Waits for every queued write, then fsyncs.
  absl::Status Finish() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
    RETURN_IF_ERROR(error_);
    if (::fsync(fd_) != 0) return ErrnoStatus(errno, "fsync", path_);
    return absl::OkStatus();
  }

 private:
  struct Job {
    Buffer buffer;
    uint64_t size, offset;
  };
  BlockWriter() = default;

  void GiveLocked(Buffer buffer) {
    if (free_bytes_ + buffer.capacity > kInFlight) return;  // freed here
    free_bytes_ += buffer.capacity;
    free_.push_back(std::move(buffer));
  }

  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      Job job = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      absl::Status st = WriteAll(job);
      lock.lock();
      busy_ = false;
      queued_bytes_ -= job.size;
      GiveLocked(std::move(job.buffer));
      if (!st.ok() && error_.ok()) error_ = st;
      cv_.notify_all();
    }
  }

  absl::Status WriteAll(const Job& job) {
    uint64_t done = 0;
    while (done < job.size) {
      const int fd = direct_fd_ >= 0 ? direct_fd_ : fd_;
      const ssize_t n = ::pwrite(fd, job.buffer.bytes.get() + done, job.size - done,
                                 static_cast<off_t>(job.offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EINVAL && fd == direct_fd_) {  // O_DIRECT refused here
        ::close(direct_fd_);
        direct_fd_ = -1;
        continue;
      }
      if (n <= 0) return ErrnoStatus(n < 0 ? errno : EIO, "write", path_);
      done += static_cast<uint64_t>(n);
    }
    return absl::OkStatus();
  }

  fs::path path_;
  int fd_ = -1, direct_fd_ = -1;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  std::vector<Buffer> free_;
  uint64_t queued_bytes_ = 0, free_bytes_ = 0;
  bool busy_ = false, stop_ = false;
  absl::Status error_;
};

absl::StatusOr<std::unique_ptr<ContainerWriter>> ContainerWriter::Create(const fs::path& out,
                                                                         const std::string& name,
                                                                         const ModelConfig& config,
                                                                         Options options) {
  RETURN_IF_ERROR(config.Validate());
  std::error_code ec;
  if (fs::exists(out, ec) && !options.overwrite) {
    return absl::AlreadyExistsError(absl::StrCat(
        "output '", out.string(), "' already exists (pass --overwrite to replace it)"));
  }
  auto w = std::unique_ptr<ContainerWriter>(new ContainerWriter());
  w->out_ = out;
  w->partial_ = out;
  w->partial_ += ".partial";
  w->options_ = options;
  fs::remove_all(w->partial_, ec);
  fs::create_directories(w->partial_, ec);
  if (ec)
    return absl::InternalError(
        absl::StrCat("cannot create '", w->partial_.string(), "': ", ec.message()));
  if (options.split_experts) fs::create_directories(w->partial_ / "experts", ec);
  w->manifest_.name = name;
  w->manifest_.config = config;
  w->manifest_.experts.resize(static_cast<size_t>(config.n_moe_layers() * config.n_experts));
  w->expert_done_.assign(w->manifest_.experts.size(), false);
  w->dense_ = std::fopen((w->partial_ / "dense.bin").c_str(), "wb");
  if (w->dense_ == nullptr) return ErrnoStatus(errno, "create", w->partial_ / "dense.bin");
  if (!options.split_experts) {
    ASSIGN_OR_RETURN(w->experts_, BlockWriter::Create(w->partial_ / "experts.bin"));
  }
  return w;
}

ContainerWriter::~ContainerWriter() {
  experts_.reset();
  for (std::FILE* f : {dense_, extra_}) {
    if (f) std::fclose(f);
  }
  if (!finished_) {
    std::error_code ec;
    fs::remove_all(partial_, ec);  // an abandoned conversion leaves nothing behind
  }
}

absl::Status ContainerWriter::AppendAligned(std::FILE* f, uint64_t* pos, uint64_t align,
                                            std::span<const uint8_t> bytes, const fs::path& path) {
  static const uint8_t kZeros[4096] = {};
  uint64_t pad = AlignUp(*pos, align) - *pos;
  if (pad > 0 && std::fwrite(kZeros, 1, pad, f) != pad) return ErrnoStatus(errno, "write", path);
  *pos += pad;
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    return ErrnoStatus(errno, "write", path);
  }
  *pos += bytes.size();
  return absl::OkStatus();
}

absl::Status ContainerWriter::AddDense(const std::string& name, quant::DType dtype,
                                       std::vector<int64_t> shape, std::span<const uint8_t> bytes) {
  if (manifest_.FindDense(name) != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("dense tensor '", name, "' added twice"));
  }
  return AddTensor(dense_, &dense_pos_, manifest_.dense_file, &manifest_.dense, name, dtype,
                   std::move(shape), bytes);
}

absl::Status ContainerWriter::AddExtra(const std::string& name, quant::DType dtype,
                                       std::vector<int64_t> shape, std::span<const uint8_t> bytes) {
  if (manifest_.FindExtra(name) != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("extra tensor '", name, "' added twice"));
  }
  if (extra_ == nullptr) {
    extra_ = std::fopen((partial_ / manifest_.extra_file).c_str(), "wb");
    if (extra_ == nullptr) return ErrnoStatus(errno, "create", partial_ / manifest_.extra_file);
  }
  return AddTensor(extra_, &extra_pos_, manifest_.extra_file, &manifest_.extra, name, dtype,
                   std::move(shape), bytes);
}

absl::Status ContainerWriter::AddTensor(std::FILE* f, uint64_t* pos, const std::string& file,
                                        std::vector<TensorEntry>* list, const std::string& name,
                                        quant::DType dtype, std::vector<int64_t> shape,
                                        std::span<const uint8_t> bytes) {
  if (shape.empty())
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has no shape"));
  TensorEntry e;
  e.name = name;
  e.dtype = dtype;
  e.shape = std::move(shape);
  ASSIGN_OR_RETURN(uint64_t want, TensorByteSize(dtype, e.shape));
  if (want != bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': ", bytes.size(),
                                                   " bytes do not match its shape and dtype"));
  }
  e.offset = AlignUp(*pos, kDenseAlignment);
  e.size = bytes.size();
  e.checksum = Checksum64(bytes.data(), bytes.size());
  RETURN_IF_ERROR(AppendAligned(f, pos, kDenseAlignment, bytes, partial_ / file));
  list->push_back(std::move(e));
  return absl::OkStatus();
}

absl::Status ContainerWriter::AddExpert(int64_t layer, int64_t expert,
                                        const std::vector<Part>& parts) {
  std::vector<PartFill> fills;
  fills.reserve(parts.size());
  for (const Part& p : parts) {
    fills.push_back({p.name, p.dtype, p.shape, [&p](uint8_t* dst, size_t size) -> absl::Status {
                       if (size != p.bytes.size()) {
                         return absl::InvalidArgumentError(absl::StrCat(
                             "part '", p.name, "': byte size does not match shape and dtype"));
                       }
                       std::memcpy(dst, p.bytes.data(), size);
                       return absl::OkStatus();
                     }});
  }
  return AddExpertFrom(layer, expert, fills);
}

absl::Status ContainerWriter::AddExpertFrom(int64_t layer, int64_t expert,
                                            const std::vector<PartFill>& parts) {
  const ModelConfig& c = manifest_.config;
  if (!manifest_.HasExpert(layer, expert)) {
    return absl::InvalidArgumentError(absl::StrCat(
        ExpertLabel(layer, expert), " out of range",
        c.IsMoeLayer(layer) || layer < 0 || layer >= c.n_layers ? "" : " (layer is dense)"));
  }
  const size_t idx = manifest_.ExpertIndex(layer, expert);
  if (expert_done_[idx]) {
    return absl::InvalidArgumentError(absl::StrCat(ExpertLabel(layer, expert), " added twice"));
  }
  ExpertBlock b;
  b.id = {static_cast<int32_t>(layer), static_cast<int32_t>(expert)};  // in range: checked above
  // Parts are 64-byte aligned inside the block so SIMD kernels can read them directly.
  uint64_t at = 0;
  for (const auto& p : parts) {
    TensorEntry e;
    e.name = p.name;
    e.dtype = p.dtype;
    e.shape = p.shape;
    if (e.shape.size() != 2 || e.shape[0] <= 0 || e.shape[1] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(ExpertLabel(layer, expert), " part '", p.name,
                                                     "': shape must be [rows, cols]"));
    }
    ASSIGN_OR_RETURN(e.size, TensorByteSize(p.dtype, e.shape));
    e.offset = AlignUp(at, 64);
    at = e.offset + e.size;
    b.parts.push_back(std::move(e));
  }
  b.size = at;
  b.padded_size = AlignUp(b.size, kExpertBlockAlignment);
  // Assembled in an aligned buffer the O_DIRECT write takes as it is; gaps and padding zeroed.
  BlockWriter::Buffer block;
  if (experts_) {
    ASSIGN_OR_RETURN(block, experts_->Take(b.padded_size));
  } else {
    ASSIGN_OR_RETURN(block.bytes, AllocateAligned(b.padded_size, 4096, /*zero=*/false));
    block.capacity = b.padded_size;
  }
  uint8_t* data = block.bytes.get();
  uint64_t end = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    std::memset(data + end, 0, b.parts[i].offset - end);
    if (auto st = parts[i].fill(data + b.parts[i].offset, b.parts[i].size); !st.ok()) {
      if (experts_) experts_->Give(std::move(block));
      return Annotate(st, ExpertLabel(layer, expert));
    }
    end = b.parts[i].offset + b.parts[i].size;
  }
  std::memset(data + end, 0, b.padded_size - end);
  b.checksum = Checksum64(data, b.size);
  std::span<const uint8_t> bytes(data, b.padded_size);
  if (options_.split_experts) {
    b.file = absl::StrCat("experts/L", layer, "_E", expert, ".bin");
    b.offset = 0;
    fs::path path = partial_ / b.file;
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) return ErrnoStatus(errno, "create", path);
    bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    ok = (std::fclose(f) == 0) && ok;
    if (!ok) return ErrnoStatus(errno, "write", path);
  } else {
    b.file = "experts.bin";
    b.offset = experts_pos_;  // every block is padded to 4 KiB: each starts aligned
    experts_pos_ += b.padded_size;
    RETURN_IF_ERROR(experts_->Write(std::move(block), b.padded_size, b.offset));
  }
  manifest_.experts[idx] = std::move(b);
  expert_done_[idx] = true;
  return absl::OkStatus();
}

absl::Status ContainerWriter::CopyFile(const fs::path& src, const std::string& dest_name) {
  std::error_code ec;
  fs::copy_file(src, partial_ / dest_name, fs::copy_options::overwrite_existing, ec);
  if (ec) return absl::InternalError(absl::StrCat("copy '", src.string(), "': ", ec.message()));
  return absl::OkStatus();
}

absl::Status ContainerWriter::WriteAuxFile(const std::string& dest_name,
                                           std::span<const uint8_t> bytes) {
  return WriteFileAtomic(
      partial_ / dest_name,
      std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

absl::Status ContainerWriter::Finish() {
  const ModelConfig& c = manifest_.config;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    for (int64_t e = 0; c.IsMoeLayer(l) && e < c.n_experts; ++e) {
      if (!expert_done_[manifest_.ExpertIndex(l, e)]) {
        return absl::FailedPreconditionError(absl::StrCat(ExpertLabel(l, e), " was never written"));
      }
    }
  }
  manifest_.dense_size = dense_pos_;
  manifest_.extra_size = extra_pos_;
  if (experts_) {
    RETURN_IF_ERROR(experts_->Finish());
    experts_.reset();
  }
  for (std::FILE** f : {&dense_, &extra_}) {
    if (*f == nullptr) continue;
    bool ok = std::fflush(*f) == 0 && ::fsync(fileno(*f)) == 0;
    ok = (std::fclose(*f) == 0) && ok;
    *f = nullptr;
    if (!ok) return ErrnoStatus(errno, "flush", partial_);
  }
  // Validate what we are about to publish with the same code readers use.
  auto round_trip = ManifestFromJson(ManifestToJson(manifest_));
  if (!round_trip.ok())
    return Annotate(round_trip.status(), "internal: written manifest does not validate");
  RETURN_IF_ERROR(WriteFileAtomic(partial_ / "manifest.json", ManifestToJson(manifest_).dump(1)));
  std::error_code ec;
  if (fs::exists(out_, ec)) fs::remove_all(out_, ec);
  fs::rename(partial_, out_, ec);
  if (ec)
    return absl::InternalError(
        absl::StrCat("rename '", partial_.string(), "' -> '", out_.string(), "': ", ec.message()));
  RETURN_IF_ERROR(SyncDirectory(out_.parent_path()));
  finished_ = true;
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Reader

absl::StatusOr<std::optional<fs::path>> FindGgufModel(const fs::path& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    if (!HasGgufMagic(path)) return std::nullopt;
    // Any part of a split set stands for the set: its first part.
    const auto split = ParseGgufSplitName(path.filename().string());
    if (split && split->no != 1) {
      const fs::path first = path.parent_path() / split->PartName(1);
      if (fs::is_regular_file(first, ec)) return first;
    }
    return path;
  }
  if (!fs::is_directory(path, ec) || fs::exists(path / "manifest.json", ec)) return std::nullopt;
  std::vector<fs::path> models;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    const fs::path& p = entry.path();
    if (p.extension() != ".gguf" || !entry.is_regular_file(ec)) continue;
    // Parts other than the first belong to a model already listed by its first part.
    if (auto split = ParseGgufSplitName(p.filename().string()); split && split->no != 1) continue;
    if (HasGgufMagic(p)) models.push_back(p);
  }
  if (models.empty()) return std::nullopt;
  std::sort(models.begin(), models.end());
  if (models.size() > 1) {
    std::vector<std::string> names;
    for (const auto& m : models) names.push_back(m.filename().string());
    return absl::InvalidArgumentError(absl::StrCat("'", path.string(), "' holds ", models.size(),
                                                   " GGUF models (", absl::StrJoin(names, ", "),
                                                   "): pass the file to serve"));
  }
  return models.front();
}

Container::~Container() = default;

fs::path Container::tokenizer_path() const { return gguf_ != nullptr ? gguf_->first_part() : dir_; }

uint64_t BlockChecksum(const ExpertBlock& block, const uint8_t* data) {
  if (block.ranges.empty()) return Checksum64(data, block.size);
  std::vector<uint64_t> sums;
  sums.reserve(block.parts.size());
  for (const TensorEntry& p : block.parts) sums.push_back(Checksum64(data + p.offset, p.size));
  return Checksum64(sums.data(), sums.size() * sizeof(uint64_t));
}

absl::Status Container::VerifyExpertBlock(const ExpertBlock& block, const uint8_t* data,
                                          std::string_view where) const {
  const uint64_t got = BlockChecksum(block, data);
  if (block.checksum_known) {
    if (got == block.checksum) return absl::OkStatus();
    return ExpertChecksumError(block, std::string(where), got);
  }
  if (gguf_ == nullptr) {
    return absl::InternalError(absl::StrCat(ExpertLabel(block.id), " has no checksum"));
  }
  return gguf_->Record(manifest_, block, got, where);
}

absl::StatusOr<std::unique_ptr<Container>> Container::Open(const fs::path& dir) {
  std::error_code ec;
  ASSIGN_OR_RETURN(std::optional<fs::path> gguf, FindGgufModel(dir));
  if (gguf) {
    auto c = std::unique_ptr<Container>(new Container());
    ASSIGN_OR_RETURN(c->gguf_, GgufInPlace::Open(*gguf, &c->manifest_));
    c->dir_ = gguf->parent_path().empty() ? fs::path(".") : gguf->parent_path();
    c->state_dir_ = c->gguf_->state_dir();
    return c;
  }
  if (!fs::is_directory(dir, ec)) {
    if (fs::exists(dir, ec)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", dir.string(), "' is neither a colibri model directory nor a GGUF file"));
    }
    return absl::NotFoundError(absl::StrCat("model directory '", dir.string(), "' does not exist"));
  }
  fs::path manifest_path = dir / "manifest.json";
  if (!fs::exists(manifest_path, ec)) {
    fs::path partial = dir;
    partial += ".partial";
    return absl::NotFoundError(
        absl::StrCat("'", dir.string(),
                     "' is not a colibri model: manifest.json is missing (convert a model "
                     "with colibri-convert)"));
  }
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(manifest_path));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", manifest_path.string(), "' is not valid JSON"));
  }
  auto manifest = ManifestFromJson(j);
  if (!manifest.ok()) return Annotate(manifest.status(), manifest_path.string());
  auto c = std::unique_ptr<Container>(new Container());
  c->dir_ = dir;
  c->state_dir_ = dir;
  c->manifest_ = std::move(*manifest);
  // Every file must exist and be large enough for what the manifest places in it.
  auto check_size = [&](const fs::path& p, uint64_t need) -> absl::Status {
    std::error_code e;
    uint64_t have = fs::file_size(p, e);
    if (e) return absl::NotFoundError(absl::StrCat("model file '", p.string(), "' is missing"));
    if (have < need) {
      return absl::DataLossError(absl::StrCat("model file '", p.string(), "' is truncated: ", have,
                                              " bytes, manifest needs ", need));
    }
    return absl::OkStatus();
  };
  // Symlinks must not lead out of the directory either (the manifest's paths are relative).
  std::error_code root_ec;
  const fs::path root = fs::weakly_canonical(fs::absolute(dir, root_ec), root_ec);
  auto confined = [&](const std::string& field, const std::string& file) -> absl::Status {
    std::error_code e;
    const fs::path real = fs::weakly_canonical(root / file, e);
    const fs::path rel = e ? fs::path() : real.lexically_relative(root);
    if (e || rel.empty() || *rel.begin() == "..") {
      return absl::InvalidArgumentError(absl::StrCat(
          "manifest ", manifest_path.string(), ": ", field, " '", file, "' resolves to '",
          e ? e.message() : real.string(), "', outside the model directory '", root.string(), "'"));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(confined("dense.file", c->manifest_.dense_file));
  std::set<std::string> checked;
  for (const auto& b : c->manifest_.experts) {
    if (!checked.insert(b.file).second) continue;
    RETURN_IF_ERROR(confined(absl::StrCat(ExpertLabel(b.id), ".file"), b.file));
  }
  if (auto files = c->manifest_.tokenizer.find("files"); files != c->manifest_.tokenizer.end()) {
    for (size_t i = 0; i < files->size(); ++i) {
      RETURN_IF_ERROR(
          confined(absl::StrCat("tokenizer.files[", i, "]"), (*files)[i].get<std::string>()));
    }
  }
  RETURN_IF_ERROR(check_size(dir / c->manifest_.dense_file, c->manifest_.dense_size));
  if (!c->manifest_.extra.empty()) {
    RETURN_IF_ERROR(confined("extra.file", c->manifest_.extra_file));
    RETURN_IF_ERROR(check_size(dir / c->manifest_.extra_file, c->manifest_.extra_size));
  }
  std::map<std::string, uint64_t> need;
  for (const auto& b : c->manifest_.experts) {
    uint64_t& n = need[b.file];
    n = std::max(n, b.offset + b.padded_size);
  }
  for (const auto& [file, n] : need) RETURN_IF_ERROR(check_size(dir / file, n));
  return c;
}

absl::StatusOr<TensorView> Container::DenseWeights::Get(const Manifest& m,
                                                        std::string_view name) const {
  const TensorEntry* e = m.FindDense(name);
  if (e == nullptr)
    return absl::NotFoundError(
        absl::StrCat("dense tensor '", std::string(name), "' is not in the model"));
  return ViewOf(*e, buffer.get());
}

namespace {

// Reads `size` bytes at `offset` of `path` into `dst`.
absl::Status ReadAt(const fs::path& path, uint64_t offset, uint64_t size, uint8_t* dst) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "open", path);
  uint64_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(fd, dst + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : EIO;
      ::close(fd);
      return ErrnoStatus(err, "read", path);
    }
    done += static_cast<uint64_t>(n);
  }
  ::close(fd);
  return absl::OkStatus();
}

absl::Status CheckTensor(const TensorEntry& t, const uint8_t* data, const char* what,
                         const fs::path& path) {
  uint64_t got = Checksum64(data, t.size);
  if (got == t.checksum) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      what, " tensor '", t.name, "' in '", path.string(), "': checksum mismatch (manifest ",
      ChecksumHex(t.checksum), ", read ", ChecksumHex(got), ")"));
}

}  // namespace

absl::StatusOr<Container::DenseWeights> Container::LoadDense() const {
  DenseWeights w;
  if (gguf_ != nullptr) {
    ASSIGN_OR_RETURN(w.buffer, AllocateAligned(manifest_.dense_size, 4096));
    w.size = manifest_.dense_size;
    RETURN_IF_ERROR(gguf_->LoadDense(manifest_, w.buffer.get()));
    return w;
  }
  fs::path path = dir_ / manifest_.dense_file;
  ASSIGN_OR_RETURN(w.buffer, AllocateAligned(manifest_.dense_size, 4096));
  w.size = manifest_.dense_size;
  RETURN_IF_ERROR(ReadAt(path, 0, w.size, w.buffer.get()));
  for (const auto& t : manifest_.dense)
    RETURN_IF_ERROR(CheckTensor(t, w.buffer.get() + t.offset, "dense", path));
  return w;
}

absl::StatusOr<AlignedBytes> Container::ReadExtra(std::string_view name) const {
  const TensorEntry* t = manifest_.FindExtra(name);
  if (t == nullptr) {
    return absl::NotFoundError(absl::StrCat("extra tensor '", std::string(name),
                                            "' is not in the model (", manifest_.extra.size(),
                                            " extra tensors)"));
  }
  if (gguf_ != nullptr) return gguf_->ReadExtra(*t);
  const fs::path path = dir_ / manifest_.extra_file;
  ASSIGN_OR_RETURN(AlignedBytes buf, AllocateAligned(std::max<uint64_t>(t->size, 1), 64));
  RETURN_IF_ERROR(ReadAt(path, t->offset, t->size, buf.get()));
  RETURN_IF_ERROR(CheckTensor(*t, buf.get(), "extra", path));
  return buf;
}

absl::StatusOr<AlignedBytes> Container::ReadExpertBlock(int64_t layer, int64_t expert) const {
  if (!manifest_.HasExpert(layer, expert)) {
    return absl::NotFoundError(absl::StrCat(ExpertLabel(layer, expert), " is not in the model"));
  }
  const ExpertBlock& b = manifest_.Expert(layer, expert);
  ASSIGN_OR_RETURN(AlignedBytes buf, AllocateAligned(b.padded_size, 4096));
  absl::Status status;
  b.ForEachRange([&](const FileRange& r) {
    if (!status.ok()) return;
    const fs::path path = dir_ / r.file;
    // O_DIRECT (ranges and buffer are 4 KiB aligned): a verify of the whole model must not push
    // everything else out of the page cache. Buffered where the filesystem refuses it.
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    bool direct = fd >= 0;
    if (fd < 0) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      status = ErrnoStatus(errno, "open", path);
      return;
    }
    uint64_t done = 0;
    while (done < r.needed) {
      ssize_t n = ::pread(fd, buf.get() + r.at + done, r.length - done,
                          static_cast<off_t>(r.offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EINVAL && direct) {
        ::close(fd);
        fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        direct = false;
        if (fd < 0) {
          status = ErrnoStatus(errno, "open", path);
          return;
        }
        continue;
      }
      if (n <= 0) {
        status =
            absl::DataLossError(absl::StrCat(ExpertLabel(layer, expert), " in '", path.string(),
                                             "': short read at offset ", r.offset + done));
        break;
      }
      done += static_cast<uint64_t>(n);
    }
    ::close(fd);
  });
  RETURN_IF_ERROR(status);
  RETURN_IF_ERROR(VerifyExpertBlock(b, buf.get(), ExpertFilePath(b).string()));
  return buf;
}

std::vector<absl::Status> VerifyModel(const Container& container,
                                      const std::function<void(uint64_t, uint64_t)>& progress) {
  const Manifest& m = container.manifest();
  std::vector<absl::Status> bad;
  if (auto d = container.LoadDense(); !d.ok()) bad.push_back(d.status());
  std::mutex mu;
  uint64_t done = 0;
  ThreadPool pool(4);
  pool.ParallelFor(static_cast<int64_t>(m.experts.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const ExpertBlock& b = m.experts[static_cast<size_t>(i)];
      auto block = container.ReadExpertBlock(b.id);
      std::lock_guard<std::mutex> lock(mu);
      if (!block.ok()) bad.push_back(block.status());
      done += b.padded_size;
      if (progress) progress(done, m.PaddedExpertBytes());
    }
  });
  for (const TensorEntry& t : m.extra) {
    if (auto bytes = container.ReadExtra(t.name); !bytes.ok()) bad.push_back(bytes.status());
  }
  return bad;
}

}  // namespace colibri::model
