#include "colibri/store/catalog.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "colibri/quant/dtype.h"
#include "nlohmann/json.hpp"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"

namespace colibri::store {

namespace {

constexpr uint8_t kBlockRecordVersion = 1;

absl::Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  std::string msg = absl::StrCat("catalog ", std::string(what), ": ", s.ToString());
  if (s.IsNotFound()) return absl::NotFoundError(msg);
  if (s.IsCorruption()) return absl::DataLossError(msg);
  if (s.IsIOError() || s.IsBusy() || s.IsTryAgain()) return absl::UnavailableError(msg);
  if (s.IsInvalidArgument()) return absl::InvalidArgumentError(msg);
  return absl::InternalError(msg);
}

std::string ModelKey(std::string_view name) { return absl::StrCat("model/", std::string(name)); }

std::string BlockPrefix(std::string_view model) {
  std::string k = absl::StrCat("block/", std::string(model));
  k.push_back('\0');
  return k;
}

void PutBe32(std::string* out, uint32_t v) {
  for (int i = 3; i >= 0; --i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::string BlockKey(std::string_view model, expert_source::ExpertId id) {
  std::string k = BlockPrefix(model);
  PutBe32(&k, static_cast<uint32_t>(id.layer));
  PutBe32(&k, static_cast<uint32_t>(id.expert));
  return k;
}

// Little-endian fixed-width writer / bounds-checked reader for block records.
void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

class Reader {
 public:
  explicit Reader(std::string_view b) : b_(b) {}
  bool U64(uint64_t* v) {
    if (b_.size() - pos_ < 8) return false;
    *v = 0;
    for (int i = 0; i < 8; ++i)
      *v |= static_cast<uint64_t>(static_cast<uint8_t>(b_[pos_ + i])) << (8 * i);
    pos_ += 8;
    return true;
  }
  bool U32(uint32_t* v) {
    if (b_.size() - pos_ < 4) return false;
    *v = 0;
    for (int i = 0; i < 4; ++i)
      *v |= static_cast<uint32_t>(static_cast<uint8_t>(b_[pos_ + i])) << (8 * i);
    pos_ += 4;
    return true;
  }
  bool U8(uint8_t* v) {
    if (pos_ >= b_.size()) return false;
    *v = static_cast<uint8_t>(b_[pos_++]);
    return true;
  }
  bool Str(std::string* s) {
    uint32_t n;
    if (!U32(&n) || b_.size() - pos_ < n) return false;
    s->assign(b_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == b_.size(); }

 private:
  std::string_view b_;
  size_t pos_ = 0;
};

nlohmann::json MetaToJson(const StoreMeta& m) {
  nlohmann::json disks = nlohmann::json::array();
  for (const auto& d : m.disks)
    disks.push_back({{"index", d.index}, {"id", d.id}, {"last_path", d.last_path}});
  return {{"version", m.version}, {"store_id", m.store_id}, {"disks", disks}};
}

absl::StatusOr<StoreMeta> MetaFromJson(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return absl::DataLossError("catalog: store meta record is not JSON");
  StoreMeta m;
  try {
    m.version = j.at("version").get<int>();
    m.store_id = j.at("store_id").get<std::string>();
    for (const auto& d : j.at("disks")) {
      m.disks.push_back({d.at("index").get<uint32_t>(), d.at("id").get<std::string>(),
                         d.value("last_path", std::string())});
    }
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("catalog: store meta record: ", e.what()));
  }
  return m;
}

nlohmann::json ModelToJson(const ModelRecord& r) {
  return {{"name", r.name},
          {"state", ModelStateName(r.state)},
          {"stripe_size", r.stripe_size},
          {"n_layers", r.n_layers},
          {"n_experts", r.n_experts},
          {"first_layer", r.first_layer},
          {"last_layer", r.last_layer},
          {"blocks_total", r.blocks_total},
          {"total_expert_bytes", r.total_expert_bytes},
          {"disk_bytes", r.disk_bytes},
          {"source_dir", r.source_dir},
          {"source_manifest_checksum", r.source_manifest_checksum},
          {"manifest", r.manifest_json}};
}

absl::StatusOr<ModelRecord> ModelFromJson(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return absl::DataLossError("catalog: model record is not JSON");
  ModelRecord r;
  try {
    r.name = j.at("name").get<std::string>();
    const std::string state = j.at("state").get<std::string>();
    if (state == "ready")
      r.state = ModelState::kReady;
    else if (state == "ingesting")
      r.state = ModelState::kIngesting;
    else if (state == "removing")
      r.state = ModelState::kRemoving;
    else
      return absl::DataLossError(
          absl::StrCat("catalog: model '", r.name, "' has unknown state '", state, "'"));
    r.stripe_size = j.at("stripe_size").get<uint64_t>();
    r.n_layers = j.at("n_layers").get<int32_t>();
    r.n_experts = j.at("n_experts").get<int32_t>();
    r.first_layer = j.at("first_layer").get<int32_t>();
    r.last_layer = j.at("last_layer").get<int32_t>();
    r.blocks_total = j.at("blocks_total").get<uint32_t>();
    r.total_expert_bytes = j.at("total_expert_bytes").get<uint64_t>();
    r.disk_bytes = j.at("disk_bytes").get<std::vector<uint64_t>>();
    r.source_dir = j.at("source_dir").get<std::string>();
    r.source_manifest_checksum = j.at("source_manifest_checksum").get<uint64_t>();
    r.manifest_json = j.at("manifest").get<std::string>();
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("catalog: model record: ", e.what()));
  }
  return r;
}

}  // namespace

const char* ModelStateName(ModelState state) {
  switch (state) {
    case ModelState::kIngesting: return "ingesting";
    case ModelState::kReady: return "ready";
    case ModelState::kRemoving: return "removing";
  }
  return "?";
}

BlockRecord BlockRecordFromManifest(const model::ExpertBlock& b) {
  BlockRecord r;
  r.id = b.id;
  r.size = b.size;
  r.padded_size = b.padded_size;
  r.checksum = b.checksum;
  for (const auto& p : b.parts) r.quant.emplace_back(quant::DTypeName(p.dtype));
  return r;
}

std::string EncodeBlockRecord(const BlockRecord& r) {
  std::string out;
  out.push_back(static_cast<char>(kBlockRecordVersion));
  PutU32(&out, static_cast<uint32_t>(r.id.layer));
  PutU32(&out, static_cast<uint32_t>(r.id.expert));
  PutU64(&out, r.size);
  PutU64(&out, r.padded_size);
  PutU64(&out, r.checksum);
  PutU32(&out, static_cast<uint32_t>(r.quant.size()));
  for (const auto& q : r.quant) {
    PutU32(&out, static_cast<uint32_t>(q.size()));
    out += q;
  }
  PutU32(&out, static_cast<uint32_t>(r.extents.size()));
  for (const auto& e : r.extents) {
    PutU32(&out, e.disk);
    PutU64(&out, e.offset);
    PutU64(&out, e.length);
    PutU64(&out, e.checksum);
    out.push_back(e.has_checksum ? 1 : 0);
  }
  return out;
}

absl::StatusOr<BlockRecord> DecodeBlockRecord(std::string_view bytes) {
  Reader rd(bytes);
  BlockRecord r;
  uint8_t version;
  uint32_t layer, expert, n_quant, n_extents;
  auto bad = [](std::string_view why) {
    return absl::DataLossError(
        absl::StrCat("catalog: malformed block record (", std::string(why), ")"));
  };
  if (!rd.U8(&version)) return bad("empty");
  if (version != kBlockRecordVersion) return bad(absl::StrCat("version ", version));
  if (!rd.U32(&layer) || !rd.U32(&expert) || !rd.U64(&r.size) || !rd.U64(&r.padded_size) ||
      !rd.U64(&r.checksum) || !rd.U32(&n_quant) || n_quant > 64) {
    return bad("header");
  }
  r.id = {static_cast<int32_t>(layer), static_cast<int32_t>(expert)};  // bytes on disk
  for (uint32_t i = 0; i < n_quant; ++i) {
    std::string q;
    if (!rd.Str(&q)) return bad("quant");
    r.quant.push_back(std::move(q));
  }
  if (!rd.U32(&n_extents) || n_extents > (1u << 20)) return bad("extent count");
  uint64_t covered = 0;
  for (uint32_t i = 0; i < n_extents; ++i) {
    Extent e;
    uint8_t has;
    if (!rd.U32(&e.disk) || !rd.U64(&e.offset) || !rd.U64(&e.length) || !rd.U64(&e.checksum) ||
        !rd.U8(&has)) {
      return bad("extent");
    }
    e.has_checksum = has != 0;
    covered += e.length;
    r.extents.push_back(e);
  }
  if (!rd.done()) return bad("trailing bytes");
  if (covered != r.padded_size || r.size > r.padded_size)
    return bad("extents do not cover the block");
  return r;
}

Catalog::~Catalog() = default;

absl::StatusOr<std::unique_ptr<Catalog>> Catalog::Open(const std::filesystem::path& dir,
                                                       Mode mode) {
  auto c = std::unique_ptr<Catalog>(new Catalog());
  c->path_ = dir;
  c->read_only_ = mode == Mode::kReadOnly;
  std::error_code ec;
  if (mode != Mode::kCreate && !std::filesystem::exists(dir / "CURRENT", ec)) {
    return absl::NotFoundError(absl::StrCat("no catalog at '", dir.string(), "'"));
  }
  rocksdb::Options options;
  options.create_if_missing = mode == Mode::kCreate;
  options.max_open_files = 64;
  options.keep_log_file_num = 2;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = c->read_only_ ? rocksdb::DB::OpenForReadOnly(options, dir.string(), &db)
                                    : rocksdb::DB::Open(options, dir.string(), &db);
  if (!s.ok()) {
    if (s.IsIOError() && s.ToString().find("lock") != std::string::npos) {
      return absl::UnavailableError(absl::StrCat(
          "catalog '", dir.string(),
          "' is open read-write by another process (an import or remove?): ", s.ToString()));
    }
    return FromRocks(s, absl::StrCat("open '", dir.string(), "'"));
  }
  c->db_.reset(db);
  return c;
}

absl::StatusOr<std::optional<std::string>> Catalog::Get(const std::string& key) const {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), key, &value);
  if (s.IsNotFound()) return std::optional<std::string>();
  RETURN_IF_ERROR(FromRocks(s, "read"));
  return std::optional<std::string>(std::move(value));
}

absl::StatusOr<std::optional<StoreMeta>> Catalog::GetMeta() const {
  ASSIGN_OR_RETURN(auto v, Get("meta"));
  if (!v) return std::optional<StoreMeta>();
  ASSIGN_OR_RETURN(StoreMeta m, MetaFromJson(*v));
  return std::optional<StoreMeta>(std::move(m));
}

absl::Status Catalog::PutMeta(const StoreMeta& meta) {
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return FromRocks(db_->Put(wo, "meta", MetaToJson(meta).dump()), "write meta");
}

absl::StatusOr<std::vector<ModelRecord>> Catalog::ListModels() const {
  std::vector<ModelRecord> out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  const std::string prefix = "model/";
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    ASSIGN_OR_RETURN(ModelRecord r, ModelFromJson(it->value().ToString()));
    out.push_back(std::move(r));
  }
  RETURN_IF_ERROR(FromRocks(it->status(), "list models"));
  return out;
}

absl::StatusOr<std::optional<ModelRecord>> Catalog::GetModel(std::string_view name) const {
  ASSIGN_OR_RETURN(auto v, Get(ModelKey(name)));
  if (!v) return std::optional<ModelRecord>();
  ASSIGN_OR_RETURN(ModelRecord r, ModelFromJson(*v));
  return std::optional<ModelRecord>(std::move(r));
}

absl::Status Catalog::PutModel(const ModelRecord& record) {
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return FromRocks(db_->Put(wo, ModelKey(record.name), ModelToJson(record).dump()),
                   absl::StrCat("write model '", record.name, "'"));
}

absl::Status Catalog::PutBlocks(std::string_view model, std::span<const BlockRecord> blocks,
                                const ModelRecord* record) {
  rocksdb::WriteBatch batch;
  for (const auto& b : blocks) batch.Put(BlockKey(model, b.id), EncodeBlockRecord(b));
  if (record != nullptr) batch.Put(ModelKey(record->name), ModelToJson(*record).dump());
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return FromRocks(db_->Write(wo, &batch),
                   absl::StrCat("write blocks of '", std::string(model), "'"));
}

absl::StatusOr<std::vector<BlockRecord>> Catalog::GetBlocks(std::string_view model) const {
  std::vector<BlockRecord> out;
  const std::string prefix = BlockPrefix(model);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    auto r = DecodeBlockRecord(std::string_view(it->value().data(), it->value().size()));
    if (!r.ok()) return Annotate(r.status(), absl::StrCat("model '", std::string(model), "'"));
    out.push_back(std::move(*r));
  }
  RETURN_IF_ERROR(FromRocks(it->status(), "list blocks"));
  return out;
}

absl::Status Catalog::DeleteModel(std::string_view model) {
  rocksdb::WriteBatch batch;
  const std::string prefix = BlockPrefix(model);
  std::string end = prefix;
  end.back() = '\x01';  // every key with the "...\0" prefix sorts before "...\1"
  batch.DeleteRange(prefix, end);
  batch.Delete(ModelKey(model));
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return FromRocks(db_->Write(wo, &batch), absl::StrCat("delete model '", std::string(model), "'"));
}

}  // namespace colibri::store
