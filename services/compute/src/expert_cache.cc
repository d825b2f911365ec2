#include "expert_cache.h"

#include <algorithm>
#include <tuple>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "colibri/core/units.h"
#include "spdlog/spdlog.h"

namespace colibri::compute {

using expert_source::CacheTier;
using expert_source::CacheTierOptions;

absl::StatusOr<std::unique_ptr<ExpertCache>> ExpertCache::Create(
    expert_source::ExpertSource* origin, const model::Container& container, uint64_t ram_bytes,
    const ExpertCacheConfig& config, backend::Backend* backend) {
  auto cache = std::unique_ptr<ExpertCache>(new ExpertCache());
  cache->config_ = config;
  const model::Manifest& m = container.manifest();
  const auto& c = m.config;
  ASSIGN_OR_RETURN(cache->policy_, expert_source::ParseCachePolicy(config.policy));
  if (config.prefetch_layers < 0)
    return absl::InvalidArgumentError("--prefetch-layers must be >= 0");
  if (config.io_threads < 0) return absl::InvalidArgumentError("--io-threads must be >= 0");
  if (config.learned_pin_fraction < 0 || config.learned_pin_fraction > 0.9) {
    return absl::InvalidArgumentError(
        "--learned-pins must be between 0 and 0.9 (a share of the expert cache)");
  }
  uint64_t largest = 0;
  for (const auto& b : m.experts) largest = std::max(largest, b.padded_size);
  const uint64_t blocks = ram_bytes / std::max<uint64_t>(largest, 1);
  const uint64_t per_token = static_cast<uint64_t>(c.n_layers * c.top_k);

  cache->heat_ = std::make_unique<expert_source::RoutingHeat>(m.name, static_cast<int>(c.n_layers),
                                                              static_cast<int>(c.n_experts),
                                                              static_cast<int>(c.top_k));
  std::filesystem::path heat_path;
  // A GGUF with nowhere to keep state (read-only directory, no cache directory) keeps no heat.
  if (config.routing_heat != "none" &&
      !(config.routing_heat.empty() && container.state_dir().empty())) {
    heat_path = config.routing_heat.empty() ? container.state_dir() / "routing_heat.json"
                                            : std::filesystem::path(config.routing_heat);
    absl::Status st = cache->heat_->Load(heat_path);
    if (st.ok()) {
      spdlog::info("routing heat of {:.0f} tokens loaded from {}", cache->heat_->tokens(),
                   heat_path.string());
    } else if (!absl::IsNotFound(st)) {
      spdlog::warn("routing heat ignored: {}", std::string(st.message()));
    }
  }

  CacheTierOptions ro;
  ro.name = "ram";
  ro.capacity_bytes = ram_bytes;
  ro.policy = cache->policy_;
  ro.policy_params =
      expert_source::DefaultPolicyParams(blocks, static_cast<int>(c.n_layers),
                                         static_cast<int>(c.n_experts), static_cast<int>(c.top_k));
  ro.io_threads = config.io_threads;
  ro.max_prefetch_reads = config.max_prefetch_reads;
  // A prediction waits at most two tokens for its use.
  ro.protect_ticks = 2 * per_token;
  ro.heat = cache->heat_.get();
  cache->ram_ = std::make_unique<CacheTier>(origin, ro);

  if (config.vram_bytes > 0) {
    if (backend->zero_copy()) {
      cache->vram_note_ =
          absl::StrCat("--vram-budget ", FormatSize(config.vram_bytes), " has no effect: the ",
                       std::string(backend->name()),
                       " backend has no device memory, so experts are cached in host RAM only "
                       "(--expert-cache-size)");
      spdlog::warn("{}", cache->vram_note_);
    } else {
      uint64_t slot = 0;
      for (const auto& b : m.experts) slot = std::max(slot, b.size);
      auto mem = expert_source::DeviceTierMemory::Create(
          backend, {.name = "vram", .budget_bytes = config.vram_bytes, .slot_bytes = slot});
      if (!mem.ok()) {
        return absl::Status(mem.status().code(),
                            absl::StrCat("--vram-budget: ", mem.status().message()));
      }
      cache->vram_memory_ = std::move(*mem);
      CacheTierOptions vo;
      vo.name = "vram";
      vo.capacity_bytes = cache->vram_memory_->capacity_bytes();
      vo.policy = cache->policy_;
      vo.policy_params = expert_source::DefaultPolicyParams(
          vo.capacity_bytes / cache->vram_memory_->slot_bytes(), static_cast<int>(c.n_layers),
          static_cast<int>(c.n_experts), static_cast<int>(c.top_k));
      vo.io_threads = std::max(1, config.vram_io_threads);
      vo.protect_ticks = 2 * per_token;
      vo.memory = cache->vram_memory_.get();  // blocks are copied into the device arena
      cache->vram_ = std::make_unique<CacheTier>(cache->ram_.get(), vo);
      spdlog::info("vram expert tier: {} experts of {} ({} of --vram-budget {})",
                   vo.capacity_bytes / cache->vram_memory_->slot_bytes(),
                   FormatSize(cache->vram_memory_->slot_bytes()), FormatSize(vo.capacity_bytes),
                   FormatSize(config.vram_bytes));
    }
  }

  expert_source::PinControllerOptions po;
  if (!config.pinned_experts.empty()) {
    ASSIGN_OR_RETURN(po.fixed, expert_source::LoadPinnedExperts(config.pinned_experts,
                                                                static_cast<int>(c.n_layers),
                                                                static_cast<int>(c.n_experts)));
  }
  cache->fixed_pins_ = po.fixed.size();
  uint64_t fixed_bytes = 0;
  for (const auto& id : po.fixed) fixed_bytes += origin->BlockSize(id);
  // Learned pins take their share of what the file pins and two working blocks leave.
  const uint64_t room =
      ram_bytes > fixed_bytes + 2 * largest ? ram_bytes - fixed_bytes - 2 * largest : 0;
  po.learned_budget_bytes = std::min(
      room, static_cast<uint64_t>(config.learned_pin_fraction * static_cast<double>(ram_bytes)));
  po.hysteresis = config.pin_hysteresis;
  po.heat_path = heat_path;
  po.interval = std::chrono::milliseconds(config.repin_interval_ms);
  auto pins = expert_source::PinController::Start(cache->ram_.get(), cache->heat_.get(), po);
  if (!pins.ok()) {
    return absl::Status(
        pins.status().code(),
        absl::StrCat("--pinned-experts ", config.pinned_experts, ": ", pins.status().message()));
  }
  cache->pins_ = std::move(*pins);

  if (config.warm_start != "off") {
    if (config.warm_start != "auto") {
      return absl::InvalidArgumentError(
          absl::StrCat("--warm-start must be auto or off, not '", config.warm_start, "'"));
    }
    // After the pins: their reads are queued first, and warming fills what room they leave.
    const std::vector<expert_source::ExpertId> order = WarmOrder(m, *cache->heat_, ram_bytes);
    cache->warm_planned_ = order.size();
    if (!order.empty()) {
      cache->ram_->Warm(order);
      spdlog::info("warm start: reading {} expert blocks into the cache in the background ({})",
                   order.size(),
                   order.size() == m.experts.size() ? "all of them, hottest first"
                                                    : "the hottest by routing heat");
    } else if (config.io_threads > 0) {
      spdlog::info(
          "warm start: the experts do not fit the cache and there is no routing heat yet; experts "
          "are "
          "read as they are first used");
    }
  }

  if (!config.trace_out.empty()) {
    // With lookahead prefetch the engine records its predictions too (version 2).
    expert_source::TraceHeader h{
        m.name,
        static_cast<int>(c.n_layers),
        static_cast<int>(c.n_experts),
        static_cast<int>(c.top_k),
        largest,
        std::min(config.prefetch_layers, expert_source::kMaxTraceLookahead)};
    ASSIGN_OR_RETURN(cache->trace_, expert_source::RoutingTraceWriter::Open(config.trace_out, h));
  }
  return cache;
}

std::vector<expert_source::ExpertId> WarmOrder(const model::Manifest& manifest,
                                               const expert_source::RoutingHeat& heat,
                                               uint64_t capacity) {
  const bool fits = manifest.PaddedExpertBytes() <= capacity;
  std::vector<expert_source::ExpertId> order;
  std::unordered_set<uint64_t> taken;
  if (heat.tokens() > 0) {
    for (const auto& [id, h] : heat.Ranked()) {
      if (h <= 0) break;
      order.push_back(id);
      taken.insert(id.Key());
    }
  }
  if (!fits) return order;
  // File order: the experts file front to back.
  std::vector<const model::ExpertBlock*> blocks;
  for (const auto& b : manifest.experts) blocks.push_back(&b);
  std::sort(blocks.begin(), blocks.end(),
            [](const model::ExpertBlock* a, const model::ExpertBlock* b) {
              return std::tie(a->file, a->offset) < std::tie(b->file, b->offset);
            });
  for (const auto* b : blocks) {
    if (taken.insert(b->id.Key()).second) order.push_back(b->id);
  }
  return order;
}

ExpertCache::~ExpertCache() {
  pins_.reset();  // saves the heat
  if (trace_) (void)trace_->Flush();
  vram_.reset();
  vram_memory_.reset();
  ram_.reset();
}

expert_source::CacheTier::ClearResult ExpertCache::Clear() {
  CacheTier::ClearResult r;
  if (vram_) {
    auto v = vram_->Clear();
    r.blocks += v.blocks;
    r.bytes += v.bytes;
  }
  auto ram = ram_->Clear();
  r.blocks += ram.blocks;
  r.bytes += ram.bytes;
  return r;
}

}  // namespace colibri::compute
