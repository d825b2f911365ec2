#include "cache_admin.h"

#include <string>

namespace colibri::compute {
namespace {

using Json = nlohmann::ordered_json;

double Ratio(double num, double den) { return den > 0 ? num / den : 0.0; }

Json TierJson(const expert_source::CacheStats& s) {
  return Json{{"tier", s.tier},
              {"capacity_bytes", s.capacity_bytes},
              {"bytes_cached", s.bytes_cached},
              {"blocks_cached", s.blocks_cached},
              {"bytes_pinned", s.bytes_pinned},
              {"blocks_pinned", s.blocks_pinned},
              {"bytes_leased", s.bytes_leased},
              {"lookups", s.lookups()},
              {"hits", s.hits},
              {"in_flight_hits", s.in_flight_hits},
              {"misses", s.misses},
              {"hit_rate", s.hit_rate()},
              {"coverage", s.coverage()},
              {"evictions", s.evictions},
              {"room_waits", s.room_waits},
              {"bytes_fetched", s.bytes_fetched},
              {"warm",
               {{"queued", s.warm_queued},
                {"reads", s.warm_reads},
                {"bytes", s.warm_bytes},
                {"skipped", s.warm_skipped}}}};
}

// How much of the model's experts is resident, and whether warming is still under way.
Json ResidencyJson(const ComputeNode& node) {
  const expert_source::CacheStats ram = node.cache_stats();
  const uint64_t total = node.manifest().PaddedExpertBytes();
  return Json{
      {"resident_bytes", ram.bytes_cached},
      {"resident_blocks", ram.blocks_cached},
      {"expert_bytes", total},
      {"expert_blocks", node.manifest().experts.size()},
      {"resident_ratio", Ratio(static_cast<double>(ram.bytes_cached), static_cast<double>(total))},
      {"capacity_bytes", ram.capacity_bytes},
      {"warming", ram.warm_queued > 0},
      {"warm_queued_blocks", ram.warm_queued}};
}

std::pair<int, std::string> Error(int status, const std::string& message) {
  return {status, Json{{"error", {{"message", message}}}}.dump()};
}

}  // namespace

Json NodeStatsJson(ComputeNode& node) {
  ExpertCache& cache = node.expert_cache();
  const expert_source::CacheStats ram = cache.ram().Stats();
  const engine::ModelCounters& mc = node.model().counters();
  const auto& ec = node.engine().counters();
  const double tokens = static_cast<double>(mc.rows.load());
  const double stall = static_cast<double>(mc.expert_wait_ns.load()) * 1e-9;

  Json tiers = Json::array();
  if (const auto* vram = cache.vram()) tiers.push_back(TierJson(vram->Stats()));
  tiers.push_back(TierJson(ram));

  Json prefetch{
      {"layers", node.model().prefetch_layers()},
      {"requested", ram.prefetch_requested},
      {"reads", ram.prefetch_reads},
      {"bytes", ram.prefetch_bytes},
      {"used", ram.prefetch_used},
      {"promoted", ram.prefetch_promoted},
      {"cancelled", ram.prefetch_cancelled},
      {"dropped", ram.prefetch_dropped},
      {"wasted_bytes", ram.prefetch_wasted_bytes},
      // used / prefetched reads; demanded blocks resident or in flight.
      {"precision", ram.prefetch_precision()},
      {"coverage", ram.coverage()},
      // The router's view: predicted experts it then picked, picked experts predicted.
      {"predicted", mc.prefetch_predicted.load()},
      {"prediction_precision", Ratio(static_cast<double>(mc.prefetch_predicted_routed.load()),
                                     static_cast<double>(mc.prefetch_predicted.load()))},
      {"prediction_recall", Ratio(static_cast<double>(mc.prefetch_predicted_routed.load()),
                                  static_cast<double>(mc.prefetch_routed.load()))}};
  const auto* pins = cache.pins();
  Json out{{"model", node.model_name()},
           {"policy", std::string(expert_source::CachePolicyName(cache.policy()))},
           {"tiers", std::move(tiers)},
           {"vram_note", cache.vram_note()},
           {"residency", ResidencyJson(node)},
           {"prefetch", std::move(prefetch)},
           // The settings in effect after auto / tune-profile resolution (auto_settings.h).
           {"settings",
            {{"expert_cache_bytes", node.options().expert_cache_bytes},
             {"kv_cache_limit", node.options().kv_cache_limit},
             {"io_threads", node.options().cache.io_threads},
             {"learned_pins", node.options().cache.learned_pin_fraction},
             {"tune_profile", node.auto_settings().profile_path},
             {"tune_profile_applied", node.auto_settings().profile_applied},
             {"tune_profile_note", node.auto_settings().profile_note}}},
           {"tokens", mc.rows.load()},
           {"generated_tokens", ec.generated_tokens.load()},
           {"expert_bytes_per_token", Ratio(static_cast<double>(ram.bytes_fetched), tokens)},
           {"stall_seconds", stall},
           {"stall_ms_per_token", Ratio(stall * 1e3, tokens)},
           {"memory",
            {{"dense_bytes", node.model().dense_bytes()},
             {"kv_cache_bytes", ec.kv_bytes.load()},
             {"expert_cache_bytes", ram.bytes_cached},
             {"expert_cache_capacity_bytes", ram.capacity_bytes}}},
           {"pins",
            {{"fixed", cache.fixed_pins()},
             {"learned", pins ? pins->learned().size() : 0},
             {"changes", pins ? pins->changes() : 0},
             {"resident", ram.blocks_pinned}}}};
  if (const auto* disk = node.disk()) {
    const store::DiskStats d = disk->store().io().Stats(0);
    out["disk"] = Json{{"bytes_read", d.bytes},
                       {"reads", d.reads},
                       {"errors", d.errors},
                       {"direct_io", d.direct},
                       {"io_uring", disk->store().io().using_io_uring()},
                       {"shed_prefetches", disk->shed_reads()}};
  }
  return out;
}

Json TierSummaryJson(ComputeNode& node) {
  const auto& m = node.manifest();
  const expert_source::CacheStats ram = node.expert_cache().ram().Stats();
  Json tiers{{"ram", {{"bytes", ram.bytes_cached}, {"capacity_bytes", ram.capacity_bytes}}}};
  if (const auto* vram = node.expert_cache().vram()) {
    const expert_source::CacheStats v = vram->Stats();
    tiers["vram"] = {{"bytes", v.bytes_cached}, {"capacity_bytes", v.capacity_bytes}};
  }
  return Json{{"layers", m.config.n_layers},
              {"experts", m.config.n_experts},
              {"expert_bytes", m.PaddedExpertBytes()},  // as the tiers count their bytes
              {"tiers", std::move(tiers)}};
}

std::vector<metrics::HttpRoute> AdminRoutes(ComputeNode* node) {
  std::vector<metrics::HttpRoute> routes;
  routes.push_back(
      {"GET", "/admin/stats", [node](const std::string&) -> std::pair<int, std::string> {
         return {200, NodeStatsJson(*node).dump()};
       }});
  // Open like the plain /health (probes), with what is resident.
  routes.push_back({"GET", "/health", [node](const std::string&) -> std::pair<int, std::string> {
                      return {200, Json{{"status", "ok"},
                                        {"model", node->model_name()},
                                        {"experts", ResidencyJson(*node)}}
                                       .dump()};
                    }});
  routes.push_back(
      {"POST", "/admin/cache/clear",
       [node](const std::string& body) -> std::pair<int, std::string> {
         nlohmann::json req = nlohmann::json::parse(body.empty() ? "{}" : body, nullptr, false);
         if (req.is_discarded() || !req.is_object())
           return Error(400, "body must be a JSON object");
         const std::string model = req.value("model", "");
         if (!model.empty() && model != node->model_name()) {
           return Error(404, "model '" + model + "' is not served here (this node serves '" +
                                 node->model_name() + "')");
         }
         const auto cleared = node->ClearCache();
         return {200, Json{{"model", node->model_name()},
                           {"cleared_blocks", cleared.blocks},
                           {"cleared_bytes", cleared.bytes}}
                          .dump()};
       }});
  return routes;
}

}  // namespace colibri::compute
