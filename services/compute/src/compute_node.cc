#include "compute_node.h"

#include <algorithm>
#include <chrono>
#include <thread>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "auto_settings.h"
#include "colibri/backend/cpu_backend.h"
#include "colibri/backend/cuda_backend.h"
#include "colibri/core/checksum.h"
#include "colibri/core/status.h"
#include "colibri/core/thread_pool.h"
#include "colibri/core/units.h"
#include "colibri/expert_source/expert_label.h"
#include "colibri/grammar/matcher.h"
#include "colibri/tokenizer/tokenizer.h"
#include "spdlog/spdlog.h"

namespace colibri::compute {
namespace {

absl::StatusOr<std::unique_ptr<backend::Backend>> MakeBackend(const ComputeNodeOptions& options) {
  if (options.backend == "cpu")
    return backend::CreateCpuBackend(
        {.threads = options.threads, .fixed_threads = options.fixed_threads});
  if (options.backend == "cuda") {
    auto be = backend::CreateCudaBackend({.device = options.device});
    if (!be.ok())
      return absl::Status(be.status().code(),
                          absl::StrCat("--backend cuda: ", be.status().message()));
    return be;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--backend '", options.backend, "': expected cpu or cuda"));
}

// What stays in device memory besides the VRAM tier and the KV caches: activations, imported
// expert copies in flight (three matrices of up to two experts), GEMM scratch, cuBLAS.
constexpr uint64_t kDeviceWorkingBytes = 512ull << 20;

absl::Status CheckDeviceMemory(const backend::Backend& be, const model::Manifest& m,
                               const ComputeNodeOptions& o) {
  const backend::MemoryInfo mem = be.memory_info();
  if (mem.total_bytes == 0) return absl::OkStatus();  // host memory: nothing to check
  uint64_t largest = 0;
  for (const auto& b : m.experts) largest = std::max(largest, b.size);
  const uint64_t working = kDeviceWorkingBytes + 2 * largest;
  const uint64_t need = m.dense_size + o.kv_cache_limit + o.cache.vram_bytes + working;
  if (need > mem.free_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "model '", m.name, "' does not fit in ", std::string(be.name()),
        " device memory: dense weights ", FormatSize(m.dense_size), " + --kv-cache-limit ",
        FormatSize(o.kv_cache_limit), " + --vram-budget ", FormatSize(o.cache.vram_bytes),
        " + working memory ", FormatSize(working), " = ", FormatSize(need), ", but only ",
        FormatSize(mem.free_bytes), " of ", FormatSize(mem.total_bytes),
        " are free; lower --vram-budget or "
        "--kv-cache-limit"));
  }
  if (o.kv_cache_limit == 0) {
    spdlog::warn(
        "--kv-cache-limit 0 (unlimited) on {}: KV caches may use the {} left after the dense "
        "weights and the "
        "VRAM tier; set a limit to keep long contexts from running the device out of memory",
        std::string(be.name()), FormatSize(mem.free_bytes - need));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ComputeNode::LoadDrafter(const ComputeNodeOptions& o) {
  ASSIGN_OR_RETURN(const engine::SpeculativeMode mode, engine::ParseSpeculativeMode(o.speculative));
  if (!o.draft_experts.empty() && !o.draft_model_dir.empty()) {
    return absl::InvalidArgumentError("--draft-experts and --draft-model exclude each other");
  }
  if (mode == engine::SpeculativeMode::kSelf && o.draft_experts.empty()) {
    return absl::InvalidArgumentError("--speculative self needs --draft-experts (e.g. q2_k)");
  }
  if (mode == engine::SpeculativeMode::kDraft && o.draft_model_dir.empty()) {
    return absl::InvalidArgumentError("--speculative draft needs --draft-model DIR");
  }
  const model::Manifest& m = container_->manifest();
  const bool own_drafter = !o.draft_experts.empty() || !o.draft_model_dir.empty();
  if (mode == engine::SpeculativeMode::kMtp && own_drafter) {
    return absl::InvalidArgumentError(
        "--speculative mtp drafts with the model's own MTP layer: drop --draft-experts and "
        "--draft-model");
  }
  // auto considers the MTP layer when the model has one and no other drafter is given.
  const bool has_mtp = m.config.nextn_layers > 0 && m.FindExtra("nextn.0.eh_proj") != nullptr;
  if (mode == engine::SpeculativeMode::kMtp ||
      (mode == engine::SpeculativeMode::kAuto && has_mtp && !own_drafter)) {
    const auto start = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(mtp_model_, model_->LoadMtp(*container_));
    spdlog::info(
        "speculative decoding ({}): the model's MTP layer, {} dense + {} experts in RAM, loaded "
        "in {:.2f} s",
        o.speculative, FormatSize(mtp_model_->dense_bytes()),
        FormatSize(mtp_model_->manifest().TotalExpertBytes()),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return absl::OkStatus();
  }
  if (mode == engine::SpeculativeMode::kOff || mode == engine::SpeculativeMode::kNgram)
    return absl::OkStatus();
  const int threads = o.threads > 0 ? o.threads : UsableCoreCount();
  const auto start = std::chrono::steady_clock::now();
  if (!o.draft_experts.empty()) {
    auto dtype = quant::ParseDType(o.draft_experts);
    if (!dtype.ok())
      return absl::InvalidArgumentError(
          absl::StrCat("--draft-experts: ", dtype.status().message()));
    ASSIGN_OR_RETURN(draft_experts_,
                     engine::ResidentExperts::Load(m, origin_.get(), *dtype, threads));
    ASSIGN_OR_RETURN(draft_model_,
                     model_->NewDrafter(draft_experts_->manifest(), draft_experts_.get()));
  } else if (!o.draft_model_dir.empty()) {
    ASSIGN_OR_RETURN(draft_container_, model::Container::Open(o.draft_model_dir));
    const model::ModelConfig& dc = draft_container_->manifest().config;
    if (dc.vocab_size != m.config.vocab_size || dc.eos_token_ids != m.config.eos_token_ids) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--draft-model ", o.draft_model_dir, ": vocabulary of ", dc.vocab_size, " tokens (EOS ",
          absl::StrJoin(dc.eos_token_ids, ","), "), the model has ", m.config.vocab_size, " (EOS ",
          absl::StrJoin(m.config.eos_token_ids, ","), "): a draft model must share the tokenizer"));
    }
    ASSIGN_OR_RETURN(draft_disk_, store::StripedSource::OpenLocal(draft_container_.get(), {}));
    ASSIGN_OR_RETURN(draft_experts_,
                     engine::ResidentExperts::Load(draft_container_->manifest(), draft_disk_.get(),
                                                   std::nullopt, threads));
    ASSIGN_OR_RETURN(draft_model_,
                     engine::Model::Load(*draft_container_, backend_.get(), draft_experts_.get()));
  } else {
    return absl::OkStatus();  // auto without a drafter model: n-gram drafting
  }
  spdlog::info("speculative decoding ({}): drafter experts {} in RAM{}, loaded in {:.2f} s",
               o.speculative, FormatSize(draft_experts_->bytes()),
               o.draft_experts.empty() ? "" : " (" + o.draft_experts + ")",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return absl::OkStatus();
}

std::string SpeculationKey(const ComputeNodeOptions& o) {
  return absl::StrCat(o.speculative, " draft-max=", o.draft_max, " draft-experts=", o.draft_experts,
                      " draft-model=", o.draft_model_dir);
}

absl::StatusOr<std::unique_ptr<ComputeNode>> ComputeNode::Create(
    const ComputeNodeOptions& requested) {
  ComputeNodeOptions options = requested;
  auto node = std::unique_ptr<ComputeNode>(new ComputeNode());
  ASSIGN_OR_RETURN(node->container_, model::Container::Open(options.model_dir));
  const model::Manifest& m = node->container_->manifest();
  // The backend first: auto budgets on a GPU are shares of its free memory, taken before
  // this node allocates anything else.
  ASSIGN_OR_RETURN(node->backend_, MakeBackend(options));
  ASSIGN_OR_RETURN(node->auto_settings_,
                   ResolveAutoSettings(&options, *node->container_, *node->backend_));
  node->options_ = options;
  uint64_t largest = 0;
  for (const auto& b : m.experts) largest = std::max(largest, b.size);
  if (options.expert_cache_bytes < 2 * largest) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--expert-cache-size ", FormatSize(options.expert_cache_bytes),
        " is below two expert blocks (", FormatSize(2 * largest), ") of model '", m.name, "'"));
  }
  // The block arena: every expert block the RAM tier holds and every read in flight lands in
  // its slots, reserved and pre-faulted now, so resident memory is fixed from the start. A
  // co-located store with shared memory delivers into its own region instead: no arena then.
  bool shm = false;
  for (const auto& t : options.stores) shm = shm || (t.rfind("unix:", 0) == 0);
  shm = shm && options.store_shm_bytes != 0;
  uint64_t largest_padded = 0;
  for (const auto& b : m.experts) largest_padded = std::max(largest_padded, b.padded_size);
  if (!shm) {
    const uint64_t arena_bytes = std::min(options.expert_cache_bytes, m.PaddedExpertBytes()) +
                                 plan::ArenaSlackBytes(largest_padded);
    const auto t0 = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(node->arena_, BlockArena::Create(arena_bytes, {.name = "expert arena"}));
    spdlog::info("expert arena: {} reserved and faulted in ({}) in {:.2f} s",
                 FormatSize(node->arena_->capacity_bytes()),
                 node->arena_->Stats().huge_pages ? "huge pages" : "4 KiB pages",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  if (options.stores.empty()) {
    // One path from the engine to io_uring: a step's misses are submitted as one batch, each
    // block in 4 MiB reads, straight into arena slots.
    ASSIGN_OR_RETURN(auto disk, store::StripedSource::OpenLocal(
                                    node->container_.get(),
                                    {.prefetch_depth = 4, .direct_io = options.cache.direct_io},
                                    {.arena = node->arena_.get()}));
    node->disk_ = disk.get();
    node->origin_ = std::move(disk);
  } else {
    rpc::MultiStoreOptions mo;
    // A GGUF in place: the stores imported the same file (colibri-expert-store import --model
    // FILE.gguf), so their blocks are its blocks; checksums are recorded as they arrive.
    if (node->container_->in_place()) {
      mo.verify = [c = node->container_.get()](const model::ExpertBlock& b, const uint8_t* data,
                                               std::string_view where) {
        return c->VerifyExpertBlock(b, data, where);
      };
    }
    mo.targets = options.stores;
    mo.model = m.name;
    mo.client_name = options.client_name;
    mo.transport = options.transport;
    mo.arena = node->arena_.get();
    mo.shm_bytes = options.store_shm_bytes != ComputeNodeOptions::kAutoShm
                       ? options.store_shm_bytes
                       : options.expert_cache_bytes +
                             2 * static_cast<uint64_t>(m.config.n_experts) * largest_padded;
    ASSIGN_OR_RETURN(auto remote,
                     rpc::MultiStoreSource::Connect(mo, &node->container_->manifest()));
    node->stores_ = remote.get();
    node->origin_ = std::move(remote);
  }
  RETURN_IF_ERROR(CheckDeviceMemory(*node->backend_, m, options));
  ASSIGN_OR_RETURN(node->cache_, ExpertCache::Create(node->origin_.get(), *node->container_,
                                                     options.expert_cache_bytes, options.cache,
                                                     node->backend_.get()));
  // Load progress: dense weights are read (and checksummed) in one pass; say so before and after.
  spdlog::info("loading model '{}': dense weights {} from {}", m.name, FormatSize(m.dense_size),
               options.model_dir);
  const auto load_start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(node->model_, engine::Model::Load(
                                     *node->container_, node->backend_.get(), node->cache_->front(),
                                     {.prefetch_layers = options.cache.prefetch_layers,
                                      .prefetch_min_weight = options.cache.prefetch_min_weight,
                                      .trace = node->cache_->trace()}));
  const double load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  spdlog::info("loaded model '{}' in {:.2f} s ({}/s); experts stream from {} on demand", m.name,
               load_seconds,
               FormatSize(static_cast<uint64_t>(static_cast<double>(m.dense_size) /
                                                std::max(load_seconds, 1e-6))),
               !options.stores.empty()        ? "the expert stores"
               : node->container_->in_place() ? "the GGUF in place"
                                              : "the model directory");
  engine::EngineOptions eo;
  eo.prefill_chunk = options.prefill_chunk;
  eo.fair_prefill = options.fair_prefill;
  eo.kv_cache_limit = options.kv_cache_limit;
  eo.max_active = options.max_batch;
  eo.max_queued = options.max_queued;
  // Constrained decoding reads the model's own tokenizer, on the first request that needs it.
  eo.vocabulary =
      [dir = options.model_dir]() -> absl::StatusOr<std::shared_ptr<const grammar::Vocabulary>> {
    ASSIGN_OR_RETURN(std::unique_ptr<tokenizer::Tokenizer> tok, tokenizer::LoadTokenizer(dir));
    return grammar::Vocabulary::FromTokenizer(*tok);
  };
  if (options.kv_offload_limit > 0 || !options.kv_persist_dir.empty()) {
    const model::ModelConfig& c = node->model_->config();
    engine::KvStoreOptions ko;
    ko.ram_limit = options.kv_offload_limit;
    ko.eight_bit = options.kv_offload_8bit;
    ko.dir = options.kv_persist_dir;
    ko.disk_limit = options.kv_persist_limit;
    // Caches are only reused by the very same model (manifest, so weights' checksums included).
    const std::string manifest = model::ManifestToJson(node->container_->manifest()).dump();
    ko.model_fingerprint = ChecksumHex(Checksum64(manifest.data(), manifest.size()));
    ko.n_layers = c.n_layers;
    ko.kv_dim = engine::KvSnapshotDim(c);
    ko.context_length = c.context_length;
    ASSIGN_OR_RETURN(node->kv_store_, engine::KvStore::Open(std::move(ko)));
    eo.kv_store = node->kv_store_.get();
  }
  RETURN_IF_ERROR(node->LoadDrafter(options));
  ASSIGN_OR_RETURN(eo.speculative, engine::ParseSpeculativeMode(options.speculative));
  eo.draft_max = options.draft_max;
  eo.draft_model = node->draft_model_.get();
  eo.mtp_model = node->mtp_model_.get();
  if (!options.speculation_costs.is_null()) {
    auto costs =
        engine::PassCosts::FromJson(options.speculation_costs, std::max(1, options.draft_max) + 1);
    if (costs.ok()) {
      eo.speculation_costs = *std::move(costs);
    } else {
      spdlog::warn("tune profile: {}; speculation measures its costs from scratch",
                   std::string(costs.status().message()));
    }
  }
  node->engine_ = std::make_unique<engine::Engine>(node->model_.get(), eo);
#ifdef __GLIBC__
  // Start-up built and dropped JSON trees of the manifest (the parse, the fingerprints): glibc
  // keeps that heap unless asked to give it back (~80 MiB for DeepSeek-V3's 14,848 expert
  // blocks, bench/RESULTS.md).
  malloc_trim(0);
#endif
  return node;
}

std::vector<ExpertUse> TopExperts(const std::vector<uint32_t>& counts,
                                  const model::ModelConfig& config) {
  std::vector<ExpertUse> out;
  const size_t E = static_cast<size_t>(config.n_experts);
  if (counts.size() != static_cast<size_t>(config.n_layers) * E) return out;
  const size_t keep = std::min<size_t>(E, static_cast<size_t>(2 * config.top_k));
  std::vector<ExpertUse> layer(E);
  for (int32_t l = 0; l < config.n_layers; ++l) {
    for (size_t e = 0; e < E; ++e)
      layer[e] = {{l, static_cast<int32_t>(e)}, counts[static_cast<size_t>(l) * E + e]};
    std::partial_sort(layer.begin(), layer.begin() + static_cast<ptrdiff_t>(keep), layer.end(),
                      [](const ExpertUse& a, const ExpertUse& b) {
                        return a.count != b.count ? a.count > b.count : a.id.expert < b.id.expert;
                      });
    for (size_t i = 0; i < keep && layer[i].count > 0; ++i) out.push_back(layer[i]);
  }
  return out;
}

absl::StatusOr<size_t> ComputeNode::PrefetchHint(std::span<const expert_source::ExpertId> ids) {
  const auto& c = model_->config();
  for (const auto& id : ids) {
    if (!manifest().HasExpert(id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("prefetch hint for ", ExpertLabel(id), " outside the model (", c.n_layers,
                       " layers, ", c.n_experts, " experts, dense layers have none)"));
    }
  }
  // Never more than half the cache: hints must not evict what the running requests need.
  const uint64_t block = ids.empty() ? 0 : cache_->front()->BlockSize(ids[0]);
  const uint64_t capacity = cache_->ram().Stats().capacity_bytes;
  const size_t limit = block == 0 ? 0 : static_cast<size_t>(capacity / 2 / block);
  const size_t n = std::min(ids.size(), limit);
  if (n > 0) cache_->front()->Prefetch(ids.subspan(0, n));
  prefetch_hints_ += n;
  return n;
}

absl::Status ComputeNode::AddStore(const std::string& target) {
  if (stores_ == nullptr) {
    return absl::FailedPreconditionError(
        "this node reads experts from its model directory, not from expert stores");
  }
  return stores_->AddStore(target);
}

absl::StatusOr<int64_t> ComputeNode::PreloadExperts() {
  const auto& c = manifest().config;
  expert_source::CacheTier* cache = &cache_->ram();
  for (int32_t l = 0; l < c.n_layers; ++l) {
    for (int32_t e = 0; c.IsMoeLayer(l) && e < c.n_experts; ++e) {
      const expert_source::ExpertId id{l, e};
      if (cache->Stats().bytes_cached + cache->BlockSize(id) > cache->Stats().capacity_bytes) {
        return static_cast<int64_t>(cache->Stats().blocks_cached);
      }
      RETURN_IF_ERROR(cache->Fetch(id, expert_source::Priority::kPrefetch).status());
    }
  }
  return static_cast<int64_t>(cache->Stats().blocks_cached);
}

}  // namespace colibri::compute
