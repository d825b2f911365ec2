#include "colibri/engine/kv_store.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "colibri/core/checksum.h"
#include "colibri/core/file_util.h"
#include "colibri/core/status.h"
#include "spdlog/spdlog.h"

namespace colibri::engine {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'C', 'L', 'B', 'R', 'K', 'V', '0', '1'};
constexpr uint32_t kVersion = 1;
// KV caches are the users' conversations: readable by the server's user only.
constexpr unsigned kFileMode = 0600;

// Fixed-size header, little-endian host layout (x86-64 / aarch64).
struct Header {
  char magic[8];
  uint32_t version;
  uint32_t dtype;
  int64_t n_layers;
  int64_t kv_dim;
  int64_t n_tokens;
  uint32_t fingerprint_len;
  uint32_t session_len;
};
static_assert(sizeof(Header) == 48);

size_t CommonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

// Parses the header, fingerprint, session and tokens; checks the sizes add up to `size`.
// On success *data_offset is where the rows start.
absl::Status ParsePrefix(std::string_view bytes, uint64_t file_size, const std::string& fingerprint,
                         const std::string& what, KvSnapshot* s, size_t* data_offset) {
  Header h;
  if (bytes.size() < sizeof(h))
    return absl::DataLossError(absl::StrCat(what, ": truncated header"));
  std::memcpy(&h, bytes.data(), sizeof(h));
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError(absl::StrCat(what, ": not a colibri KV cache file"));
  }
  if (h.version != kVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": KV file version ", h.version, ", expected ", kVersion));
  }
  const auto dtype = static_cast<quant::DType>(h.dtype);
  if (dtype != quant::DType::kF32 && dtype != quant::DType::kQ8_0) {
    return absl::DataLossError(absl::StrCat(what, ": unsupported row type ", h.dtype));
  }
  if (h.n_layers <= 0 || h.n_layers > 4096 || h.kv_dim <= 0 || h.kv_dim > (1 << 20) ||
      h.n_tokens <= 0 || h.n_tokens > (int64_t{1} << 24) || h.fingerprint_len > 4096 ||
      h.session_len > 4096 || (dtype == quant::DType::kQ8_0 && h.kv_dim % 32 != 0)) {
    return absl::DataLossError(absl::StrCat(what, ": implausible header"));
  }
  s->dtype = dtype;
  s->n_layers = h.n_layers;
  s->kv_dim = h.kv_dim;
  const uint64_t tokens_bytes = static_cast<uint64_t>(h.n_tokens) * sizeof(int32_t);
  const uint64_t rows_bytes = static_cast<uint64_t>(h.n_layers) * 2 *
                              static_cast<uint64_t>(h.n_tokens) * quant::RowBytes(dtype, h.kv_dim);
  const uint64_t prefix = sizeof(h) + uint64_t{h.fingerprint_len} + h.session_len + tokens_bytes;
  if (prefix + rows_bytes + sizeof(uint64_t) != file_size) {
    return absl::DataLossError(absl::StrCat(what, ": size ", file_size,
                                            " does not match its header (expected ",
                                            prefix + rows_bytes + sizeof(uint64_t), ")"));
  }
  if (bytes.size() < prefix) return absl::DataLossError(absl::StrCat(what, ": truncated"));
  const std::string_view fp = bytes.substr(sizeof(h), h.fingerprint_len);
  if (fp != fingerprint) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": KV cache of another model"));
  }
  s->session_id.assign(bytes.substr(sizeof(h) + h.fingerprint_len, h.session_len));
  s->tokens.resize(static_cast<size_t>(h.n_tokens));
  std::memcpy(s->tokens.data(), bytes.data() + sizeof(h) + h.fingerprint_len + h.session_len,
              tokens_bytes);
  *data_offset = static_cast<size_t>(prefix);
  return absl::OkStatus();
}

}  // namespace

size_t KvSnapshot::RowBytes() const { return quant::RowBytes(dtype, kv_dim); }

std::string KvStore::Encode(const KvSnapshot& s, const std::string& fingerprint) {
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.version = kVersion;
  h.dtype = static_cast<uint32_t>(s.dtype);
  h.n_layers = s.n_layers;
  h.kv_dim = s.kv_dim;
  h.n_tokens = static_cast<int64_t>(s.tokens.size());
  h.fingerprint_len = static_cast<uint32_t>(fingerprint.size());
  h.session_len = static_cast<uint32_t>(s.session_id.size());
  std::string out;
  out.reserve(sizeof(h) + fingerprint.size() + s.session_id.size() + s.tokens.size() * 4 +
              s.rows.size() + 8);
  out.append(reinterpret_cast<const char*>(&h), sizeof(h));
  out.append(fingerprint);
  out.append(s.session_id);
  out.append(reinterpret_cast<const char*>(s.tokens.data()), s.tokens.size() * sizeof(int32_t));
  out.append(reinterpret_cast<const char*>(s.rows.data()), s.rows.size());
  const uint64_t sum = Checksum64(out.data(), out.size());
  out.append(reinterpret_cast<const char*>(&sum), sizeof(sum));
  return out;
}

absl::StatusOr<KvSnapshot> KvStore::Decode(std::string_view bytes, const std::string& fingerprint,
                                           const std::string& what) {
  KvSnapshot s;
  size_t offset = 0;
  RETURN_IF_ERROR(ParsePrefix(bytes, bytes.size(), fingerprint, what, &s, &offset));
  const size_t body = bytes.size() - sizeof(uint64_t);
  uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + body, sizeof(stored));
  if (Checksum64(bytes.data(), body) != stored) {
    return absl::DataLossError(absl::StrCat(what, ": checksum mismatch"));
  }
  s.rows.assign(bytes.begin() + static_cast<ptrdiff_t>(offset),
                bytes.begin() + static_cast<ptrdiff_t>(body));
  return s;
}

absl::StatusOr<std::unique_ptr<KvStore>> KvStore::Open(KvStoreOptions options) {
  if (options.n_layers <= 0 || options.kv_dim <= 0) {
    return absl::InvalidArgumentError("KV store: the model shape (layers, kv_dim) is required");
  }
  std::unique_ptr<KvStore> store(new KvStore(std::move(options)));
  if (!store->options_.dir.empty()) {
    RETURN_IF_ERROR(store->Index());
    store->writer_ = std::thread([s = store.get()] { s->WriterLoop(); });
  }
  return store;
}

KvStore::~KvStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

std::list<KvStore::Entry>::iterator KvStore::FindLocked(uint64_t id) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->id == id) return it;
  }
  return entries_.end();
}

void KvStore::WriterLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !spill_queue_.empty(); });
    if (spill_queue_.empty()) return;  // stop_ and drained
    const auto [id, bytes] = spill_queue_.front();
    spill_queue_.pop_front();
    auto it = FindLocked(id);
    if (it == entries_.end() || !it->ram) {  // taken or replaced meanwhile (they settled the bytes)
      idle_cv_.notify_all();
      continue;
    }
    std::shared_ptr<KvSnapshot> snap = it->ram;  // readers only from here on (TakeBest copies)
    const std::string name = absl::StrCat(
        ChecksumHex(Checksum64(snap->tokens.data(), snap->tokens.size() * 4)), "-", id, ".kv");
    writing_++;
    lock.unlock();
    const std::string encoded = Encode(*snap, options_.model_fingerprint);
    const fs::path path = options_.dir / name;
    if (options_.before_disk_write) options_.before_disk_write(path);
    absl::Status st = WriteFileAtomic(path, encoded, kFileMode);
    lock.lock();
    std::vector<fs::path> doomed;
    it = FindLocked(id);
    if (it != entries_.end() && it->ram == snap) {
      spilling_bytes_ -= bytes;
      it->spilling = false;
    }
    if (it == entries_.end() || it->ram != snap) {
      if (st.ok()) doomed.push_back(path);  // nobody wants it any more
    } else if (st.ok()) {
      it->path = path;
      it->disk_bytes = encoded.size();
      it->ram.reset();
      ram_bytes_ -= bytes;
      stats_.disk_entries++;
      EnforceDiskLimitLocked(&doomed);
    } else {
      spdlog::warn("KV cache not persisted: {}", std::string(st.message()));
      ram_bytes_ -= bytes;
      stats_.dropped++;
      entries_.erase(it);
    }
    if (!doomed.empty()) {
      lock.unlock();
      RemoveFiles(doomed);
      lock.lock();
    }
    writing_--;  // only now: Flush() returns with the deletions done
    idle_cv_.notify_all();
  }
}

void KvStore::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return spill_queue_.empty() && writing_ == 0; });
}

quant::DType KvStore::snapshot_dtype() const {
  return options_.eight_bit && options_.kv_dim % 32 == 0 ? quant::DType::kQ8_0 : quant::DType::kF32;
}

absl::Status KvStore::Index() {
  const fs::path& dir = options_.dir;
  std::error_code ec;
  if (fs::create_directories(dir, ec))
    fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  if (ec)
    return absl::InvalidArgumentError(
        absl::StrCat("KV persistence directory ", dir.string(), ": ", ec.message()));
  fs::directory_iterator iter(dir, ec);
  std::vector<std::pair<fs::file_time_type, Entry>> found;
  if (ec)
    return absl::InvalidArgumentError(
        absl::StrCat("KV persistence directory ", dir.string(), ": ", ec.message()));
  for (; iter != fs::directory_iterator(); iter.increment(ec)) {
    if (ec) {
      spdlog::warn("KV persistence directory {}: {}", dir.string(), ec.message());
      break;
    }
    const fs::path p = iter->path();
    std::error_code file_ec;
    const bool regular = iter->is_regular_file(file_ec);
    const std::string name = p.filename().string();
    if (p.extension() != ".kv" || !regular) {
      // An interrupted write of ours ("<hash>.kv.<pid>.tmp"); nothing else is touched.
      if (regular && name.find(".kv.") != std::string::npos && p.extension() == ".tmp")
        fs::remove(p, file_ec);
      continue;
    }
    // New entries are named "<hash>-<id>.kv" with ids above every id already on disk, so a new
    // file never takes the name of a reloaded one (whose deletion may still be pending).
    if (const auto dash = name.rfind('-'); dash != std::string::npos) {
      uint64_t id = 0;
      const char* first = name.data() + dash + 1;
      const char* last = name.data() + name.size() - 3;  // before ".kv"
      if (auto [ptr, err] = std::from_chars(first, last, id); err == std::errc() && ptr == last)
        next_id_ = std::max(next_id_, id + 1);
    }
    std::ifstream in(p, std::ios::binary);
    std::string head(64 << 10, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<size_t>(in.gcount()));
    // The token list can be longer than the first read: read exactly the prefix it needs.
    Header h{};
    if (head.size() >= sizeof(h)) {
      std::memcpy(&h, head.data(), sizeof(h));
      const uint64_t need =
          sizeof(h) + uint64_t{h.fingerprint_len} + h.session_len +
          static_cast<uint64_t>(std::max<int64_t>(0, std::min<int64_t>(h.n_tokens, 1 << 24))) * 4;
      if (need > head.size() && need <= (uint64_t{64} << 20)) {
        in.clear();
        in.seekg(0);
        head.resize(need);
        in.read(head.data(), static_cast<std::streamsize>(need));
        head.resize(static_cast<size_t>(in.gcount()));
      }
    }
    KvSnapshot s;
    size_t offset = 0;
    const uint64_t size = fs::file_size(p, file_ec);
    absl::Status st =
        file_ec ? absl::DataLossError(absl::StrCat(p.string(), ": ", file_ec.message()))
                : ParsePrefix(head, size, options_.model_fingerprint, p.string(), &s, &offset);
    if (st.ok() && (s.n_layers != options_.n_layers || s.kv_dim != options_.kv_dim)) {
      st = absl::FailedPreconditionError(absl::StrCat(p.string(), ": KV cache of another shape"));
    }
    if (st.ok() && options_.context_length > 0 &&
        static_cast<int64_t>(s.tokens.size()) > options_.context_length) {
      st = absl::FailedPreconditionError(absl::StrCat(p.string(), ": ", s.tokens.size(),
                                                      " positions, more than the context length ",
                                                      options_.context_length));
    }
    if (!st.ok()) {
      spdlog::warn("skipping KV cache file: {}", std::string(st.message()));
      stats_.load_errors++;
      continue;
    }
    const fs::file_time_type mtime = fs::last_write_time(p, file_ec);
    found.emplace_back(
        mtime, Entry{std::move(s.tokens), std::move(s.session_id), nullptr, p, size, 0, false});
  }
  // Most recent first, as entries_ is kept: the disk limit then deletes the oldest files.
  std::stable_sort(found.begin(), found.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (auto& [mtime, e] : found) {
    e.id = next_id_++;
    entries_.push_back(std::move(e));
    stats_.disk_entries++;
  }
  std::vector<fs::path> doomed;
  EnforceDiskLimitLocked(&doomed);
  RemoveFiles(doomed);
  if (!entries_.empty())
    spdlog::info("KV store: {} cached conversations in {}", entries_.size(), dir.string());
  return absl::OkStatus();
}

absl::Status KvStore::WriteLocked(Entry* e) {
  const std::string name =
      absl::StrCat(ChecksumHex(Checksum64(e->tokens.data(), e->tokens.size() * sizeof(int32_t))),
                   "-", e->id, ".kv");
  const fs::path path = options_.dir / name;
  const std::string bytes = Encode(*e->ram, options_.model_fingerprint);
  RETURN_IF_ERROR(WriteFileAtomic(path, bytes, kFileMode));
  e->path = path;
  e->disk_bytes = bytes.size();
  return absl::OkStatus();
}

void KvStore::EnforceDiskLimitLocked(std::vector<fs::path>* doomed) {
  if (options_.disk_limit == 0) return;
  uint64_t total = 0;
  for (const Entry& e : entries_) total += e.ram ? 0 : e.disk_bytes;
  for (auto it = entries_.rbegin(); it != entries_.rend() && total > options_.disk_limit;) {
    if (it->ram) {
      ++it;
      continue;
    }
    doomed->push_back(it->path);
    total -= it->disk_bytes;
    stats_.disk_entries--;
    stats_.dropped++;
    it = std::make_reverse_iterator(entries_.erase(std::next(it).base()));
  }
}

void KvStore::RemoveFiles(const std::vector<fs::path>& paths) const {
  for (const fs::path& p : paths) {
    if (options_.before_disk_remove) options_.before_disk_remove(p);
    std::error_code ec;
    fs::remove(p, ec);  // best effort: the index no longer holds it either way
  }
}

void KvStore::SpillLocked() {
  // Oldest RAM entries first, until the RAM entries not already on their way to disk fit.
  for (auto it = entries_.rbegin();
       it != entries_.rend() && ram_bytes_ > spilling_bytes_ + options_.ram_limit;) {
    if (!it->ram || it->spilling) {
      ++it;
      continue;
    }
    const uint64_t b = it->ram->bytes();
    if (!options_.dir.empty()) {
      it->spilling = true;
      spilling_bytes_ += b;
      spill_queue_.push_back({it->id, b});
      cv_.notify_all();
      ++it;
      continue;
    }
    ram_bytes_ -= b;
    stats_.dropped++;
    it = std::make_reverse_iterator(entries_.erase(std::next(it).base()));
  }
}

void KvStore::Put(KvSnapshot snapshot) {
  std::vector<fs::path> doomed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    PutLocked(std::move(snapshot), &doomed);
  }
  RemoveFiles(doomed);
}

void KvStore::PutLocked(KvSnapshot snapshot, std::vector<fs::path>* doomed) {
  stats_.offloaded++;
  if (snapshot.tokens.empty()) return;
  // A newer cache of the same history (or of a history it extends) replaces the older one.
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->tokens.size() <= snapshot.tokens.size() &&
        CommonPrefix(it->tokens, snapshot.tokens) == it->tokens.size()) {
      if (it->ram) {
        ram_bytes_ -= it->ram->bytes();
        if (it->spilling) spilling_bytes_ -= it->ram->bytes();
      } else {
        doomed->push_back(it->path);
        stats_.disk_entries--;
      }
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  Entry e;
  e.tokens = snapshot.tokens;
  e.session_id = snapshot.session_id;
  e.id = next_id_++;
  ram_bytes_ += snapshot.bytes();
  e.ram = std::make_shared<KvSnapshot>(std::move(snapshot));
  entries_.push_front(std::move(e));
  SpillLocked();
  EnforceDiskLimitLocked(doomed);
}

std::list<KvStore::Entry>::iterator KvStore::BestLocked(const std::vector<int32_t>& prompt,
                                                        const std::string& session_id,
                                                        size_t* len) {
  auto best = entries_.end();
  size_t best_len = 0;
  if (prompt.empty()) {
    *len = 0;
    return best;
  }
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const size_t n = std::min(CommonPrefix(it->tokens, prompt), prompt.size() - 1);
    const bool same_session = !session_id.empty() && it->session_id == session_id;
    if (n > best_len || (n == best_len && n > 0 && same_session)) {
      best = it;
      best_len = n;
    }
  }
  *len = best_len;
  return best_len == 0 ? entries_.end() : best;
}

size_t KvStore::BestPrefix(const std::vector<int32_t>& prompt,
                           const std::string& session_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t len = 0;
  const_cast<KvStore*>(this)->BestLocked(prompt, session_id, &len);
  return len;
}

KvSnapshot KvSnapshot::Prefix(size_t n) const {
  KvSnapshot p;
  n = std::min(n, tokens.size());
  p.tokens.assign(tokens.begin(), tokens.begin() + static_cast<ptrdiff_t>(n));
  p.session_id = session_id;
  p.dtype = dtype;
  p.n_layers = n_layers;
  p.kv_dim = kv_dim;
  p.rows.resize(static_cast<size_t>(n_layers) * 2 * n * RowBytes());
  for (int64_t l = 0; l < n_layers; ++l) {
    for (int side = 0; side < 2; ++side) {
      if (n > 0) std::memcpy(p.Row(l, side, 0), Row(l, side, 0), n * RowBytes());
    }
  }
  return p;
}

std::optional<KvSnapshot> KvStore::TakeBest(const std::vector<int32_t>& prompt,
                                            const std::string& session_id, size_t longer_than) {
  std::unique_lock<std::mutex> lock(mu_);
  size_t len = 0;
  auto it = BestLocked(prompt, session_id, &len);
  if (it == entries_.end() || len <= longer_than) return std::nullopt;
  // A prompt that continues the whole history takes the entry (the engine writes it back,
  // longer, when it is evicted again); one that shares only a start (a common system prompt)
  // gets a copy of that prefix and the conversation stays stored for its own next turn.
  const bool whole = len + 1 >= it->tokens.size();
  if (it->ram) {
    // The writer thread may be reading a spilling snapshot: copy it then, move it otherwise.
    KvSnapshot s = !whole         ? it->ram->Prefix(len)
                   : it->spilling ? KvSnapshot(*it->ram)
                                  : std::move(*it->ram);
    if (whole) {
      const uint64_t ram_bytes = s.bytes();
      ram_bytes_ -= ram_bytes;
      if (it->spilling) spilling_bytes_ -= ram_bytes;
      entries_.erase(it);
    } else {
      entries_.splice(entries_.begin(), entries_, it);  // recently useful
    }
    stats_.restored++;
    return s;
  }
  // On disk: read without the lock. A whole take leaves the store now (nobody else can take
  // it meanwhile); a prefix copy stays, and may be deleted or replaced while it is read.
  const uint64_t id = it->id;
  const fs::path path = it->path;
  const std::vector<int32_t> tokens = it->tokens;
  if (whole) {
    stats_.disk_entries--;
    entries_.erase(it);
  } else {
    entries_.splice(entries_.begin(), entries_, it);
  }
  lock.unlock();
  if (options_.before_disk_read) options_.before_disk_read(path);
  absl::StatusOr<std::string> bytes = ReadFileToString(path);
  absl::StatusOr<KvSnapshot> s = bytes.ok()
                                     ? Decode(*bytes, options_.model_fingerprint, path.string())
                                     : absl::StatusOr<KvSnapshot>(bytes.status());
  if (s.ok() &&
      (s->n_layers != options_.n_layers || s->kv_dim != options_.kv_dim || s->tokens != tokens)) {
    s = absl::DataLossError(absl::StrCat(path.string(), ": changed since it was indexed"));
  }
  if (s.ok() && !whole) s = s->Prefix(len);
  if (whole) RemoveFiles({path});  // taken, or unusable: either way it leaves the store
  lock.lock();
  if (!s.ok()) {
    if (!whole) {
      it = FindLocked(id);
      if (it == entries_.end() || it->path != path)
        return std::nullopt;  // deleted meanwhile: a plain miss
      stats_.disk_entries--;
      entries_.erase(it);
    }
    spdlog::warn("KV cache file unusable: {}", std::string(s.status().message()));
    stats_.load_errors++;
    lock.unlock();
    if (!whole) RemoveFiles({path});
    return std::nullopt;
  }
  stats_.restored++;
  return std::move(*s);
}

absl::Status KvStore::PersistAll() {
  Flush();
  if (options_.dir.empty()) return absl::OkStatus();
  absl::Status first_error;
  std::vector<fs::path> doomed;
  std::unique_lock<std::mutex> lock(mu_);
  for (Entry& e : entries_) {
    if (!e.ram) continue;
    if (absl::Status st = WriteLocked(&e); !st.ok()) {
      // The others may still fit (a full disk refuses a large cache, not necessarily a small one).
      spdlog::warn("KV cache not persisted: {}", std::string(st.message()));
      if (first_error.ok()) first_error = st;
      continue;
    }
    ram_bytes_ -= e.ram->bytes();
    e.ram.reset();
    stats_.disk_entries++;
  }
  EnforceDiskLimitLocked(&doomed);
  lock.unlock();
  RemoveFiles(doomed);
  absl::Status synced = SyncDirectory(options_.dir);
  return first_error.ok() ? synced : first_error;
}

KvStoreStats KvStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  KvStoreStats s = stats_;
  s.ram_bytes = ram_bytes_;
  s.ram_entries = 0;
  for (const Entry& e : entries_) s.ram_entries += e.ram ? 1 : 0;
  return s;
}

}  // namespace colibri::engine
