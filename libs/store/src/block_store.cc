#include "colibri/store/block_store.h"

#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "colibri/core/checksum.h"
#include "colibri/core/status.h"
#include "colibri/core/units.h"
#include "colibri/expert_source/expert_label.h"
#include "colibri/model/container.h"
#include "colibri/quant/dtype.h"
#include "colibri/store/disk_set.h"
#include "spdlog/spdlog.h"

namespace colibri::store {

namespace fs = std::filesystem;

namespace {

constexpr char kChecksumPayload[] = "colibri.store/checksum-mismatch";
// Largest single read: bounds how long one request holds a disk ahead of a demand read.
constexpr uint64_t kMaxRunBytes = 4ull << 20;

absl::Status ChecksumMismatch(std::string message) {
  absl::Status s = absl::DataLossError(std::move(message));
  s.SetPayload(kChecksumPayload, absl::Cord("1"));
  return s;
}

std::string ExpertName(const StoredModel& m, const BlockRecord& b) {
  return absl::StrCat(ExpertLabel(b.id), " of model '", m.name(), "'");
}

// Completion of one block read: the last extent to land reports the first error.
struct ReadState {
  std::atomic<size_t> remaining{0};
  std::mutex mu;
  absl::Status status;
  BlockStore::Done done;
  void Record(absl::Status s) {
    if (s.ok()) return;
    std::lock_guard<std::mutex> lock(mu);
    if (status.ok()) status = std::move(s);
  }
};

}  // namespace

bool IsChecksumMismatch(const absl::Status& status) {
  return status.code() == absl::StatusCode::kDataLoss &&
         status.GetPayload(kChecksumPayload).has_value();
}

const BlockRecord* StoredModel::Find(expert_source::ExpertId id) const {
  if (!InRange(id)) return nullptr;
  const BlockRecord& b = blocks_[Index(id)];
  return b.padded_size == 0 ? nullptr : &b;
}

BlockStore::~BlockStore() {
  // Reads in flight finish (their callbacks use this store) before any member goes away.
  if (io_) io_->Shutdown();
}

absl::StatusOr<std::unique_ptr<BlockStore>> BlockStore::Open(const BlockStoreOptions& options) {
  auto s = std::unique_ptr<BlockStore>(new BlockStore());
  std::vector<std::string> disk_names;
  std::vector<fs::path> roots;
  std::unique_ptr<Catalog> catalog;
  if (!options.disks.empty()) {
    ASSIGN_OR_RETURN(fs::path cpath, FindCatalog(options.disks, options.catalog));
    ASSIGN_OR_RETURN(catalog, Catalog::Open(cpath, Catalog::Mode::kReadOnly));
    ASSIGN_OR_RETURN(auto meta, catalog->GetMeta());
    if (!meta) {
      return absl::FailedPreconditionError(
          absl::StrCat("catalog '", cpath.string(), "' has no store record"));
    }
    ASSIGN_OR_RETURN(roots, ResolveDisks(*meta, options.disks));
    for (const auto& r : roots) disk_names.push_back(r.string());
  } else if (!options.catalog.empty()) {
    return absl::InvalidArgumentError("a catalog path needs the store's disks (--disk)");
  }
  for (const auto& d : options.model_dirs) disk_names.push_back(d.string());
  for (const model::Container* c : options.containers) disk_names.push_back(c->dir().string());
  if (disk_names.empty())
    return absl::InvalidArgumentError(
        "nothing to serve: give disks (--disk) or model directories (--model)");
  s->checksum_failures_ = std::make_unique<std::atomic<uint64_t>[]>(disk_names.size());
  ASSIGN_OR_RETURN(s->io_, IoEngine::Create(disk_names, options.io));
  if (catalog) RETURN_IF_ERROR(s->AddStriped(*catalog, roots));
  for (size_t i = 0; i < options.model_dirs.size(); ++i) {
    RETURN_IF_ERROR(s->AddModelDir(options.model_dirs[i], static_cast<uint32_t>(roots.size() + i)));
  }
  for (size_t i = 0; i < options.containers.size(); ++i) {
    RETURN_IF_ERROR(
        s->AddContainer(*options.containers[i],
                        static_cast<uint32_t>(roots.size() + options.model_dirs.size() + i)));
  }
  if (options.read_cache_bytes > 0)
    s->cache_ = std::make_unique<ReadCache>(options.read_cache_bytes);
  return s;
}

absl::Status BlockStore::AddStriped(const Catalog& catalog, const std::vector<fs::path>& roots) {
  ASSIGN_OR_RETURN(auto records, catalog.ListModels());
  for (const ModelRecord& rec : records) {
    if (rec.state != ModelState::kReady) {
      std::string why =
          absl::StrCat("model '", rec.name, "' is ", ModelStateName(rec.state),
                       rec.state == ModelState::kIngesting ? " (rerun the import to finish it)"
                                                           : " (rerun remove to finish it)");
      spdlog::warn("not serving {}", why);
      skipped_.push_back(std::move(why));
      continue;
    }
    const std::string where =
        absl::StrCat("model '", rec.name, "' in catalog '", catalog.path().string(), "'");
    auto m = std::make_unique<StoredModel>();
    m->name_ = rec.name;
    auto j = nlohmann::json::parse(rec.manifest_json, nullptr, false);
    if (j.is_discarded())
      return absl::DataLossError(absl::StrCat(where, ": stored manifest is not JSON"));
    auto manifest = model::ManifestFromJson(j);
    if (!manifest.ok())
      return Annotate(manifest.status(), absl::StrCat(where, ": stored manifest"));
    m->manifest_ = std::move(*manifest);
    m->manifest_.name = rec.name;
    m->first_layer_ = rec.first_layer;
    m->last_layer_ = rec.last_layer;
    m->stripe_size_ = rec.stripe_size;
    m->total_expert_bytes_ = rec.total_expert_bytes;
    m->index_ = static_cast<uint32_t>(models_.size());
    m->origin_ = absl::StrCat("striped over ", roots.size(), " disk(s), stripe ",
                              FormatSize(rec.stripe_size));
    if (rec.disk_bytes.size() != roots.size()) {
      return absl::DataLossError(absl::StrCat(where, ": recorded for ", rec.disk_bytes.size(),
                                              " disks, the store has ", roots.size()));
    }
    // The files first: a missing disk file is the most likely problem and the clearest message.
    for (uint32_t d = 0; d < roots.size(); ++d) {
      const fs::path path = StripeFilePath(roots[d], rec.name);
      std::error_code ec;
      const uint64_t have = fs::file_size(path, ec);
      if (ec) {
        return absl::NotFoundError(
            absl::StrCat("model '", rec.name, "': stripe file '", path.string(), "' on disk ", d,
                         " is missing (the catalog expects ", rec.disk_bytes[d], " bytes)"));
      }
      if (have < rec.disk_bytes[d]) {
        return absl::DataLossError(absl::StrCat(
            "model '", rec.name, "': stripe file '", path.string(), "' on disk ", d,
            " is truncated: ", have, " bytes, the catalog expects ", rec.disk_bytes[d]));
      }
      ASSIGN_OR_RETURN(uint32_t file, io_->OpenFile(d, path));
      m->files_.push_back(file);
    }
    ASSIGN_OR_RETURN(auto blocks, catalog.GetBlocks(rec.name));
    if (blocks.size() != rec.blocks_total) {
      return absl::DataLossError(
          absl::StrCat(where, ": ", blocks.size(), " block records, expected ", rec.blocks_total));
    }
    m->blocks_.resize(static_cast<size_t>(m->n_layers() * m->n_experts()));
    for (auto& b : blocks) {
      const BlockRecord* dup = m->Find(b.id);
      if (b.id.layer < rec.first_layer || b.id.layer > rec.last_layer ||
          !m->manifest_.HasExpert(b.id) || dup != nullptr) {
        return absl::DataLossError(
            absl::StrCat(where, ": unexpected block record for ", ExpertLabel(b.id)));
      }
      const model::ExpertBlock& want = m->manifest_.Expert(b.id);
      if (want.size != b.size || want.checksum != b.checksum || want.padded_size != b.padded_size) {
        return absl::DataLossError(
            absl::StrCat(where, ": ", ExpertLabel(b.id),
                         " differs between the catalog and the stored manifest"));
      }
      for (const Extent& e : b.extents) {
        if (e.disk >= roots.size() || e.offset + e.length > rec.disk_bytes[e.disk] ||
            !e.has_checksum) {
          return absl::DataLossError(absl::StrCat(
              where, ": ", ExpertLabel(b.id), " has a stripe outside disk ", e.disk, "'s file"));
        }
      }
      m->blocks_[m->Index(b.id)] = std::move(b);
    }
    models_.push_back(std::move(m));
  }
  return absl::OkStatus();
}

absl::Status BlockStore::AddModelDir(const fs::path& dir, uint32_t disk) {
  ASSIGN_OR_RETURN(auto container, model::Container::Open(dir));
  if (container->in_place()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "expert store: '", dir.string(),
        "' is a GGUF; a store serves it from its own disks: import it (colibri-expert-store "
        "import --model FILE.gguf --disk ...), then serve with --disk"));
  }
  containers_.push_back(std::move(container));
  return AddContainer(*containers_.back(), disk);
}

absl::Status BlockStore::AddContainer(const model::Container& container, uint32_t disk) {
  auto m = std::make_unique<StoredModel>();
  m->manifest_ = container.manifest();
  m->name_ = m->manifest_.name;
  if (FindModel(m->name_) != nullptr) {
    return absl::AlreadyExistsError(
        absl::StrCat("two models are named '", m->name_, "' (", container.dir().string(), ")"));
  }
  m->last_layer_ = m->n_layers() - 1;
  m->total_expert_bytes_ = m->manifest_.TotalExpertBytes();
  m->index_ = static_cast<uint32_t>(models_.size());
  m->origin_ = container.dir().string();
  m->container_ = &container;
  std::map<std::string, uint32_t> files;
  m->blocks_.resize(static_cast<size_t>(m->n_layers() * m->n_experts()));
  m->plain_.resize(m->blocks_.size());
  absl::Status status;
  for (const model::ExpertBlock& b : m->manifest_.experts) {
    BlockRecord r = BlockRecordFromManifest(b);
    // Indexed by layer * n_experts + expert like catalog models: dense layers leave holes.
    const size_t index = m->Index(b.id);
    // Extents of at most kMaxRunBytes: the reads of one block spread over the disk's queue.
    b.ForEachRange([&](const model::FileRange& range) {
      if (!status.ok()) return;
      auto it = files.find(range.file);
      if (it == files.end()) {
        auto id = io_->OpenFile(disk, container.FilePath(range.file));
        if (!id.ok()) {
          status = id.status();
          return;
        }
        it = files.emplace(range.file, *id).first;
      }
      for (uint64_t off = 0; off < range.length; off += kMaxRunBytes) {
        const uint64_t len = std::min(kMaxRunBytes, range.length - off);
        r.extents.push_back(Extent{disk, range.offset + off, len, 0, false});
        m->plain_[index].push_back(
            {it->second, range.needed > off ? std::min(len, range.needed - off) : 0});
      }
    });
    RETURN_IF_ERROR(status);
    m->blocks_[index] = std::move(r);
  }
  models_.push_back(std::move(m));
  return absl::OkStatus();
}

const StoredModel* BlockStore::FindModel(std::string_view name) const {
  for (const auto& m : models_) {
    if (m->name() == name) return m.get();
  }
  return nullptr;
}

absl::StatusOr<const BlockRecord*> BlockStore::FindBlock(std::string_view model,
                                                         expert_source::ExpertId id,
                                                         const StoredModel** found) const {
  const StoredModel* m = FindModel(model);
  if (m == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("expert store does not hold model '", std::string(model), "'"));
  }
  const BlockRecord* b = m->Find(id);
  if (b == nullptr) {
    const bool in_range = m->InRange(id);
    return absl::NotFoundError(absl::StrCat(
        ExpertLabel(id), " ", in_range ? "is not held by this store" : "is not in model", " '",
        std::string(model), "'",
        in_range ? absl::StrCat(" (it holds layers ", m->first_layer(), "-", m->last_layer(), ")")
                 : ""));
  }
  if (found != nullptr) *found = m;
  return b;
}

std::optional<ReadCacheStats> BlockStore::read_cache_stats() const {
  if (!cache_) return std::nullopt;
  return cache_->Stats();
}

uint64_t BlockStore::CacheKey(const StoredModel& model, const BlockRecord& block) {
  return (static_cast<uint64_t>(model.index_) << 48) |
         (static_cast<uint64_t>(block.id.layer) << 24) | static_cast<uint64_t>(block.id.expert);
}

void BlockStore::ReadRaw(const StoredModel& model, const BlockRecord& block, uint8_t* dst,
                         Priority priority, BlockRead* read, Done done, uint64_t window_begin,
                         uint64_t window_end) {
  // A block's stripe units on one disk lie back to back in that disk's file (the plan deals
  // them in order), so each disk gets one vectored read per run of units (up to kMaxRunBytes):
  // large sequential requests whatever the stripe size. Each unit is still verified alone.
  struct Run {
    uint32_t file = 0;
    uint64_t offset = 0;  // in the file
    uint64_t bytes = 0;
    std::vector<size_t> units;  // indices into block.extents
    std::vector<uint64_t> at;   // each unit's offset in dst
    std::vector<bool> whole;    // the unit is read whole (so it can be verified)
    std::vector<iovec> iov;
    uint64_t required = 0;  // bytes of the run the file must hold
  };
  const size_t index = model.Index(block.id);
  const bool striped = model.stripe_size_ != 0;
  std::vector<Run> runs;
  std::vector<int> open_run(io_->disk_count(), -1);  // by disk: the run units may still join
  uint64_t at = 0;                                   // block offset of extent k
  for (size_t k = 0; k < block.extents.size(); at += block.extents[k].length, ++k) {
    const Extent& e = block.extents[k];
    const uint64_t from = std::max(at, window_begin);
    const uint64_t to = std::min(at + e.length, window_end);
    if (from >= to) continue;
    const uint64_t file_offset = e.offset + (from - at);
    const uint32_t file = striped ? model.files_[e.disk] : model.plain_[index][k].file;
    int r = open_run[e.disk];
    if (r < 0 || runs[r].file != file || runs[r].offset + runs[r].bytes != file_offset ||
        runs[r].bytes + (to - from) > kMaxRunBytes) {
      runs.push_back(Run{file, file_offset, 0, {}, {}, {}, {}, 0});
      r = static_cast<int>(runs.size() - 1);
      open_run[e.disk] = r;
    }
    // Every byte of a stripe unit exists; a plain extent's may end early (its last `needed`).
    const uint64_t must = striped ? to : std::min(to, at + model.plain_[index][k].needed);
    runs[r].required = runs[r].bytes + (must > from ? must - from : 0);
    runs[r].bytes += to - from;
    runs[r].units.push_back(k);
    runs[r].at.push_back(from - window_begin);
    runs[r].whole.push_back(from == at && to == at + e.length);
    runs[r].iov.push_back(iovec{dst + (from - window_begin), to - from});
  }
  const bool whole_block = window_begin == 0 && window_end >= block.padded_size;
  auto state = std::make_shared<ReadState>();
  state->remaining = runs.size();
  state->done = std::move(done);
  for (Run& run : runs) {
    const uint32_t file = run.file;
    const uint64_t run_offset = run.offset;
    const uint64_t required = run.required;
    const IoEngine::Ticket t = io_->ReadV(
        file, run.offset, std::move(run.iov), priority,
        [this, state, &model, &block, file, run_offset, units = std::move(run.units),
         unit_at = std::move(run.at), whole = std::move(run.whole), dst,
         whole_block](absl::Status s) {
          const uint32_t disk = io_->file_disk(file);
          const size_t n = block.extents.size();
          auto where = [&](size_t k) {
            return absl::StrCat(ExpertName(model, block), ": stripe ", k, " of ", n, " on disk '",
                                io_->disk_name(disk), "' ('", io_->file_path(file).string(),
                                "' at offset ", block.extents[k].offset, ")");
          };
          if (!s.ok()) {
            std::string which = units.size() == 1
                                    ? absl::StrCat("stripe ", units[0])
                                    : absl::StrCat("stripes ", units.front(), "..", units.back());
            state->Record(Annotate(
                s, absl::StrCat(ExpertName(model, block), ": ", which, " of ", n, " on disk '",
                                io_->disk_name(disk), "' ('", io_->file_path(file).string(),
                                "' at offset ", run_offset, ")")));
          } else {
            for (size_t u = 0; u < units.size(); ++u) {
              const size_t k = units[u];
              const Extent& e = block.extents[k];
              if (!e.has_checksum || !whole[u]) continue;
              const uint64_t got = Checksum64(dst + unit_at[u], e.length);
              if (got != e.checksum) {
                checksum_failures_[disk]++;
                state->Record(ChecksumMismatch(
                    absl::StrCat(where(k), ": checksum mismatch (catalog ", ChecksumHex(e.checksum),
                                 ", read ", ChecksumHex(got), ")")));
              }
            }
          }
          if (--state->remaining != 0) return;
          absl::Status final_status;
          {
            std::lock_guard<std::mutex> lock(state->mu);
            final_status = state->status;
          }
          if (final_status.ok() && whole_block && model.container_ != nullptr) {
            // A plain model: the block checksum is the only one there is.
            const model::ExpertBlock& b = model.container_->manifest().Expert(block.id);
            absl::Status v = model.container_->VerifyExpertBlock(
                b, dst, absl::StrCat("'", model.container_->ExpertFilePath(b).string(), "'"));
            if (v.code() == absl::StatusCode::kDataLoss) {
              checksum_failures_[disk]++;
              final_status =
                  ChecksumMismatch(absl::StrCat("model '", model.name(), "': ", v.message()));
            } else {
              final_status = std::move(v);
            }
          }
          state->done(std::move(final_status));
        },
        required);
    // Not held across ReadV: after a shutdown `done` runs inside it. A Cancel racing with the
    // start misses the reads not recorded yet (it is advisory).
    std::lock_guard<std::mutex> lock(read->mu);
    read->tickets.push_back(t);
  }
}

BlockStore::ReadHandle BlockStore::ReadInto(const StoredModel& model, const BlockRecord& block,
                                            uint8_t* dst, Priority priority, Done done) {
  if (!cache_) {
    auto read = std::make_shared<BlockRead>();
    ReadRaw(model, block, dst, priority, read.get(), std::move(done), 0, block.padded_size);
    return read;
  }
  return ReadShared(model, block, priority,
                    [dst, done = std::move(done)](absl::StatusOr<SharedBlock> b) {
                      if (!b.ok()) {
                        done(b.status());
                        return;
                      }
                      std::memcpy(dst, (*b)->data(), (*b)->padded_size);
                      done(absl::OkStatus());
                    });
}

BlockStore::ReadHandle BlockStore::ReadShared(const StoredModel& model, const BlockRecord& block,
                                              Priority priority, SharedDone done) {
  const uint64_t key = CacheKey(model, block);
  if (cache_) {
    if (SharedBlock hit = cache_->Lookup(key)) {
      done(std::move(hit));
      return nullptr;
    }
  }
  ReadHandle read;
  {
    std::lock_guard<std::mutex> lock(inflight_mu_);
    auto it = inflight_.find(key);
    if (it != inflight_.end()) {
      it->second->waiters.push_back(std::move(done));
      return it->second;
    }
    read = std::make_shared<BlockRead>();
    read->key = key;
    read->shared = true;
    read->waiters.push_back(std::move(done));
    inflight_[key] = read;
  }
  auto finish = [this, read](absl::StatusOr<SharedBlock> result) {
    std::vector<SharedDone> waiters;
    {
      std::lock_guard<std::mutex> lock(inflight_mu_);
      auto it = inflight_.find(read->key);
      if (it != inflight_.end() && it->second == read) inflight_.erase(it);
      waiters = std::move(read->waiters);
    }
    for (auto& w : waiters) w(result);
  };
  auto buffer = std::make_shared<BlockBuffer>();
  buffer->size = block.size;
  buffer->padded_size = block.padded_size;
  auto bytes = BufferPool::Default().Get(block.padded_size);
  if (!bytes.ok()) {
    finish(bytes.status());
    return nullptr;
  }
  buffer->bytes = std::move(*bytes);
  uint8_t* dst = buffer->bytes.get();
  ReadRaw(
      model, block, dst, priority, read.get(),
      [this, key, buffer, finish](absl::Status s) {
        if (!s.ok()) {
          finish(s);
          return;
        }
        SharedBlock shared = buffer;
        if (cache_) cache_->Insert(key, shared);
        finish(std::move(shared));
      },
      0, block.padded_size);
  return read;
}

std::pair<uint64_t, uint64_t> BlockStore::PartWindow(const BlockRecord& block, uint64_t begin,
                                                     uint64_t end) {
  // Whole stripe units (they carry checksums), or the pages of the range.
  constexpr uint64_t kPage = model::kExpertBlockAlignment;
  uint64_t window_begin = std::numeric_limits<uint64_t>::max(), window_end = 0, at = 0;
  for (const Extent& e : block.extents) {
    const uint64_t from = std::max(at, begin), to = std::min(at + e.length, end);
    if (from < to) {
      window_begin =
          std::min(window_begin, e.has_checksum ? at : std::max(at, from / kPage * kPage));
      window_end = std::max(
          window_end, e.has_checksum ? at + e.length : std::min(at + e.length, AlignUp(to, kPage)));
    }
    at += e.length;
  }
  return {window_begin, window_end};
}

BlockStore::ReadHandle BlockStore::ReadRange(const StoredModel& model, const BlockRecord& block,
                                             uint64_t begin, uint64_t end, Priority priority,
                                             SharedDone done) {
  if (begin == 0 && end >= block.size) return ReadShared(model, block, priority, std::move(done));
  if (cache_) {
    if (SharedBlock hit = cache_->Lookup(CacheKey(model, block))) {
      done(std::move(hit));
      return nullptr;
    }
  }
  const auto [window_begin, window_end] = PartWindow(block, begin, end);
  if (window_end <= window_begin) {
    done(absl::InternalError(absl::StrCat(ExpertName(model, block), ": no stripe covers bytes [",
                                          begin, ", ", end, ")")));
    return nullptr;
  }
  auto buffer = std::make_shared<BlockBuffer>();
  buffer->size = block.size;
  buffer->padded_size = block.padded_size;
  buffer->offset = window_begin;
  auto bytes = BufferPool::Default().Get(window_end - window_begin);
  if (!bytes.ok()) {
    done(bytes.status());
    return nullptr;
  }
  buffer->bytes = std::move(*bytes);
  auto read = std::make_shared<BlockRead>();
  ReadRaw(
      model, block, buffer->bytes.get(), priority, read.get(),
      [buffer, done = std::move(done)](absl::Status s) {
        if (!s.ok()) {
          done(std::move(s));
          return;
        }
        done(SharedBlock(buffer));
      },
      window_begin, window_end);
  return read;
}

void BlockStore::Cancel(const ReadHandle& read) {
  if (!read) return;
  if (read->shared) {
    std::lock_guard<std::mutex> lock(inflight_mu_);
    if (read->waiters.size() > 1) return;  // someone else still wants the block
    // A caller asking for the block from now on starts a read of its own.
    auto it = inflight_.find(read->key);
    if (it != inflight_.end() && it->second == read) inflight_.erase(it);
  }
  std::lock_guard<std::mutex> lock(read->mu);
  for (IoEngine::Ticket t : read->tickets) io_->Cancel(t);
}

void BlockStore::Promote(const ReadHandle& read) {
  if (!read) return;
  std::lock_guard<std::mutex> lock(read->mu);
  for (IoEngine::Ticket t : read->tickets) io_->Promote(t);
}

}  // namespace colibri::store
