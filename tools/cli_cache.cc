// colibri-cli expert cache commands:
//   cache clear --server URL --model NAME [--api-key K]
//       drops every unleased expert block of a running colibri-server / colibri-compute
//       (POST URL/admin/cache/clear); prints the JSON answer.
//   stats --server URL [--json] [--api-key K]
//       hit rate per tier, prefetch precision and coverage, bytes read per token, stall time
//       (GET URL/admin/stats) as a table, or the JSON.
//   trace-replay --trace FILE --cache-size N|P%|SIZE [--policy adaptive|lru|lfu|routing|all]
//                [--prefetch-layers N] [--per-layer] [--json]
//       replays a routing trace (--trace-out, trace-gen) through each policy and Belady's offline
//       optimum at the same capacity: N blocks, P% of the model's experts, or a byte size (e.g.
//       8G, with the trace's block size). A version 2 trace (lookahead predictions) is also
//       replayed with lookahead prefetch through the default policy (--prefetch-layers, default
//       the trace's depth; 0: off): coverage (hits + prefetches in time) against Belady's demand
//       hit rate, and the bytes read for wrong predictions. --per-layer adds each policy with
//       the budget split evenly per layer.
//   trace-gen --model mixtral-8x7b|deepseek-v2-lite|qwen1.5-moe --out FILE [--seed 1]
//             [--prompts N] [--partial-probs]
//       writes a synthetic decode trace (version 2) from a router with published statistics
//       (libs/expert_source/include/colibri/expert_source/synthetic_routing.h) and prints them.
// URL: http://host:port (colibri-server's HTTP port, colibri-compute's metrics port).
// Exit status: 0 ok; 1 the server or file could not be reached or read; 2 bad arguments.
#include <httplib.h>

#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "colibri/core/units.h"
#include "colibri/expert_source/cache_policy.h"
#include "colibri/expert_source/routing_trace.h"
#include "colibri/expert_source/synthetic_routing.h"
#include "nlohmann/json.hpp"

namespace {

using Json = nlohmann::ordered_json;
namespace es = colibri::expert_source;

// CLI11 turns a RuntimeError thrown from a subcommand callback into main()'s return value.
[[noreturn]] void Exit(int code) { throw CLI::RuntimeError(code); }
[[noreturn]] void Fail(int code, const std::string& what) {
  std::fprintf(stderr, "error: %s\n", what.c_str());
  Exit(code);
}

struct ServerFlags {
  std::string server;
  std::string api_key;
};

httplib::Headers AuthHeaders(const ServerFlags& f) {
  httplib::Headers h;
  if (!f.api_key.empty()) h.emplace("Authorization", "Bearer " + f.api_key);
  return h;
}

std::string BaseUrl(const std::string& server) {
  std::string s = server;
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s.find("://") == std::string::npos ? "http://" + s : s;
}

Json CallServer(const ServerFlags& f, const std::string& method, const std::string& path,
                const std::string& body) {
  httplib::Client cli(BaseUrl(f.server));
  cli.set_connection_timeout(10);
  cli.set_read_timeout(120);
  auto res = method == "POST" ? cli.Post(path, AuthHeaders(f), body, "application/json")
                              : cli.Get(path, AuthHeaders(f));
  if (!res)
    Fail(1, "cannot reach " + BaseUrl(f.server) + path + ": " + httplib::to_string(res.error()));
  Json j = Json::parse(res->body, nullptr, false);
  if (res->status != 200) {
    std::string msg = res->body;
    if (!j.is_discarded() && j.contains("error") && j["error"].contains("message"))
      msg = j["error"]["message"];
    Fail(1, BaseUrl(f.server) + path + " answered " + std::to_string(res->status) + ": " + msg);
  }
  if (j.is_discarded()) Fail(1, BaseUrl(f.server) + path + " did not answer JSON");
  return j;
}

std::string Pct(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f%%", 100.0 * x);
  return buf;
}

void PrintStats(const Json& s) {
  std::printf("model %s, policy %s\n\n", s.value("model", "").c_str(),
              s.value("policy", "").c_str());
  std::printf(
      "| tier | capacity | cached | pinned | lookups | hit rate | coverage | evictions | read "
      "below |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& t : s["tiers"]) {
    std::printf("| %s | %s | %s | %s | %llu | %s | %s | %llu | %s |\n", t.value("tier", "").c_str(),
                colibri::FormatSize(t.value("capacity_bytes", uint64_t{0})).c_str(),
                colibri::FormatSize(t.value("bytes_cached", uint64_t{0})).c_str(),
                colibri::FormatSize(t.value("bytes_pinned", uint64_t{0})).c_str(),
                static_cast<unsigned long long>(t.value("lookups", uint64_t{0})),
                Pct(t.value("hit_rate", 0.0)).c_str(), Pct(t.value("coverage", 0.0)).c_str(),
                static_cast<unsigned long long>(t.value("evictions", uint64_t{0})),
                colibri::FormatSize(t.value("bytes_fetched", uint64_t{0})).c_str());
  }
  if (!s.value("vram_note", "").empty())
    std::printf("\nvram: %s\n", s.value("vram_note", "").c_str());
  const Json& p = s["prefetch"];
  std::printf(
      "\nprefetch: %d layers; precision %s (used %llu of %llu reads), coverage %s, wasted %s, "
      "cancelled %llu, dropped %llu; router predictions: precision %s, recall %s\n",
      p.value("layers", 0), Pct(p.value("precision", 0.0)).c_str(),
      static_cast<unsigned long long>(p.value("used", uint64_t{0})),
      static_cast<unsigned long long>(p.value("reads", uint64_t{0})),
      Pct(p.value("coverage", 0.0)).c_str(),
      colibri::FormatSize(p.value("wasted_bytes", uint64_t{0})).c_str(),
      static_cast<unsigned long long>(p.value("cancelled", uint64_t{0})),
      static_cast<unsigned long long>(p.value("dropped", uint64_t{0})),
      Pct(p.value("prediction_precision", 0.0)).c_str(),
      Pct(p.value("prediction_recall", 0.0)).c_str());
  std::printf(
      "tokens %llu: %s of experts read per token, stall %.3f ms per token (%.3f s in all)\n",
      static_cast<unsigned long long>(s.value("tokens", uint64_t{0})),
      colibri::FormatSize(static_cast<uint64_t>(s.value("expert_bytes_per_token", 0.0))).c_str(),
      s.value("stall_ms_per_token", 0.0), s.value("stall_seconds", 0.0));
  const Json& m = s["memory"];
  std::printf("memory: dense %s, kv caches %s, experts %s of %s\n",
              colibri::FormatSize(m.value("dense_bytes", uint64_t{0})).c_str(),
              colibri::FormatSize(m.value("kv_cache_bytes", uint64_t{0})).c_str(),
              colibri::FormatSize(m.value("expert_cache_bytes", uint64_t{0})).c_str(),
              colibri::FormatSize(m.value("expert_cache_capacity_bytes", uint64_t{0})).c_str());
  const Json& pins = s["pins"];
  std::printf("pins: %llu from file, %llu learned (%llu changes), %llu resident\n",
              static_cast<unsigned long long>(pins.value("fixed", uint64_t{0})),
              static_cast<unsigned long long>(pins.value("learned", uint64_t{0})),
              static_cast<unsigned long long>(pins.value("changes", uint64_t{0})),
              static_cast<unsigned long long>(pins.value("resident", uint64_t{0})));
}

struct ReplayFlags {
  std::string trace;
  std::string cache_size;
  std::string policy = "all";
  int prefetch_layers = -1;
  bool per_layer = false;
  bool json = false;
};

// N blocks, P% of the model's experts, or a byte size divided by the trace's block size.
uint64_t CapacityBlocks(const std::string& text, const es::TraceHeader& h) {
  const uint64_t experts = static_cast<uint64_t>(h.n_layers) * static_cast<uint64_t>(h.n_experts);
  uint64_t n = 0;
  if (absl::SimpleAtoi(text, &n)) return n;
  if (!text.empty() && text.back() == '%') {
    double pct = 0;
    if (!absl::SimpleAtod(text.substr(0, text.size() - 1), &pct) || pct < 0 || pct > 100) {
      Fail(2, "--cache-size: '" + text + "' is not a percentage");
    }
    return static_cast<uint64_t>(pct / 100.0 * static_cast<double>(experts) + 0.5);
  }
  auto bytes = colibri::ParseSize(text);
  if (!bytes.ok()) Fail(2, "--cache-size: " + std::string(bytes.status().message()));
  if (h.block_bytes == 0)
    Fail(2, "--cache-size in bytes needs a trace that records block_bytes; give blocks or P%");
  return *bytes / h.block_bytes;
}

void RunReplay(const ReplayFlags& f) {
  auto trace = es::ReadTrace(f.trace);
  if (!trace.ok()) Fail(1, std::string(trace.status().message()));
  std::vector<es::CachePolicyKind> kinds;
  if (f.policy == "all") {
    kinds = {es::CachePolicyKind::kAdaptive, es::CachePolicyKind::kLru, es::CachePolicyKind::kLfu,
             es::CachePolicyKind::kRouting};
  } else {
    auto k = es::ParseCachePolicy(f.policy);
    if (!k.ok()) Fail(2, "--policy: " + std::string(k.status().message()));
    kinds = {*k};
  }
  const uint64_t blocks = CapacityBlocks(f.cache_size, trace->header);
  const auto accesses = es::TraceAccesses(*trace);
  const es::ReplayResult belady = es::ReplayBelady(accesses, blocks);
  Json out{{"trace", f.trace},
           {"model", trace->header.model},
           {"capacity_blocks", blocks},
           {"lookups", belady.lookups},
           {"belady_hit_rate", belady.hit_rate()}};
  const es::TraceHeader& h = trace->header;
  const auto params = es::DefaultPolicyParams(blocks, h.n_layers, h.n_experts, h.top_k);
  auto of_belady = [&](double rate) {
    return belady.hit_rate() > 0 ? rate / belady.hit_rate() : 0.0;
  };
  Json rows = Json::array();
  for (auto kind : kinds) {
    const es::ReplayResult r = es::ReplayWithPolicy(accesses, blocks, kind, params);
    rows.push_back(Json{{"policy", std::string(es::CachePolicyName(kind))},
                        {"hits", r.hits},
                        {"hit_rate", r.hit_rate()},
                        {"of_belady", of_belady(r.hit_rate())}});
    if (f.per_layer) {
      const es::ReplayResult p =
          es::ReplayPerLayer(accesses, h.n_layers, blocks, kind, h.n_experts, h.top_k);
      rows.push_back(Json{{"policy", std::string(es::CachePolicyName(kind)) + ", per-layer budget"},
                          {"hits", p.hits},
                          {"hit_rate", p.hit_rate()},
                          {"of_belady", of_belady(p.hit_rate())}});
    }
  }
  out["policies"] = rows;
  if (f.prefetch_layers > h.lookahead_layers) {
    Fail(2, "--prefetch-layers " + std::to_string(f.prefetch_layers) + ": the trace predicts " +
                std::to_string(h.lookahead_layers) + " layers ahead");
  }
  const int depth = f.prefetch_layers < 0 ? h.lookahead_layers : f.prefetch_layers;
  if (depth > 0) {
    const es::PrefetchReplayResult p = es::ReplayWithPrefetch(
        accesses, blocks, es::kDefaultCachePolicy, params, depth, h.block_bytes);
    out["prefetch"] = Json{{"policy", std::string(es::kDefaultCachePolicyName)},
                           {"layers", depth},
                           {"coverage", p.coverage()},
                           {"prefetch_hits", p.prefetch_hits},
                           {"prefetch_reads", p.prefetch_reads},
                           {"prefetch_wasted", p.prefetch_wasted},
                           {"prefetch_dropped", p.prefetch_dropped},
                           {"wasted_bytes", p.wasted_bytes},
                           {"coverage_minus_belady", p.coverage() - belady.hit_rate()}};
  }
  if (f.json) {
    std::printf("%s\n", out.dump(2).c_str());
    Exit(0);
  }
  std::printf(
      "trace %s: model %s, %llu lookups, cache of %llu blocks (%.1f%% of %d x %d experts)\n\n",
      f.trace.c_str(), trace->header.model.c_str(), static_cast<unsigned long long>(belady.lookups),
      static_cast<unsigned long long>(blocks),
      100.0 * static_cast<double>(blocks) / (trace->header.n_layers * trace->header.n_experts),
      trace->header.n_layers, trace->header.n_experts);
  std::printf("| policy | hit rate | of Belady |\n|---|---|---|\n");
  for (const auto& r : rows) {
    std::printf("| %s | %s | %s |\n", r["policy"].get<std::string>().c_str(),
                Pct(r["hit_rate"]).c_str(), Pct(r["of_belady"]).c_str());
  }
  std::printf("| belady (offline optimum) | %s | 100.0%% |\n", Pct(belady.hit_rate()).c_str());
  if (out.contains("prefetch")) {
    const Json& p = out["prefetch"];
    const uint64_t reads = p["prefetch_reads"].get<uint64_t>();
    std::printf(
        "\nprefetch %d layers ahead (%s): coverage %s (Belady's demand hit rate %s), %llu of %llu "
        "prefetch reads wasted (%s), %llu dropped\n",
        depth, std::string(es::kDefaultCachePolicyName).c_str(), Pct(p["coverage"]).c_str(),
        Pct(belady.hit_rate()).c_str(),
        static_cast<unsigned long long>(p["prefetch_wasted"].get<uint64_t>()),
        static_cast<unsigned long long>(reads),
        h.block_bytes ? colibri::FormatSize(p["wasted_bytes"].get<uint64_t>()).c_str()
                      : "no block size in trace",
        static_cast<unsigned long long>(p["prefetch_dropped"].get<uint64_t>()));
  }
  Exit(0);
}

}  // namespace

void AddCacheCommands(CLI::App& app) {
  auto cache = app.add_subcommand("cache", "Operate on a running server's expert cache");
  cache->require_subcommand(1);
  auto clear =
      cache->add_subcommand("clear", "Drop every unleased expert block (POST /admin/cache/clear)");
  auto clear_flags = std::make_shared<ServerFlags>();
  auto model = std::make_shared<std::string>();
  clear
      ->add_option("--server", clear_flags->server,
                   "http://host:port of colibri-server or colibri-compute's metrics")
      ->required();
  clear->add_option("--model", *model, "Model name the server must be serving")->required();
  clear->add_option("--api-key", clear_flags->api_key, "Bearer key, if the server needs one");
  clear->callback([clear_flags, model] {
    Json body{{"model", *model}};
    Json j = CallServer(*clear_flags, "POST", "/admin/cache/clear", body.dump());
    std::printf("%s\n", j.dump().c_str());
    Exit(0);
  });

  auto stats = app.add_subcommand("stats", "Expert cache and prefetch numbers of a running server");
  auto stats_flags = std::make_shared<ServerFlags>();
  auto json = std::make_shared<bool>(false);
  stats
      ->add_option("--server", stats_flags->server,
                   "http://host:port of colibri-server or colibri-compute's metrics")
      ->required();
  stats->add_option("--api-key", stats_flags->api_key, "Bearer key, if the server needs one");
  stats->add_flag("--json", *json, "Print the JSON as served");
  stats->callback([stats_flags, json] {
    Json j = CallServer(*stats_flags, "GET", "/admin/stats", "");
    if (*json) {
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      PrintStats(j);
    }
    Exit(0);
  });

  auto replay = app.add_subcommand(
      "trace-replay", "Hit rate of cache policies vs Belady's optimum on a routing trace");
  auto rf = std::make_shared<ReplayFlags>();
  replay->add_option("--trace", rf->trace, "Routing trace (--trace-out of run / server / compute)")
      ->required();
  replay
      ->add_option("--cache-size", rf->cache_size,
                   "Capacity: N blocks, P% of the experts, or a size like 8G")
      ->required();
  replay->add_option("--policy", rf->policy, "adaptive, lru, lfu, routing or all")
      ->capture_default_str();
  replay
      ->add_option("--prefetch-layers", rf->prefetch_layers,
                   "Lookahead prefetch depth to simulate (-1: the trace's; 0: none)")
      ->capture_default_str();
  replay->add_flag("--per-layer", rf->per_layer,
                   "Also replay with the budget split evenly per layer");
  replay->add_flag("--json", rf->json, "Print JSON");
  replay->callback([rf] { RunReplay(*rf); });

  auto gen = app.add_subcommand(
      "trace-gen", "Write a synthetic decode routing trace with real routers' statistics");
  auto model_name = std::make_shared<std::string>("mixtral-8x7b");
  auto out_path = std::make_shared<std::string>();
  auto seed = std::make_shared<uint64_t>(1);
  auto prompts = std::make_shared<int>(0);
  auto partial = std::make_shared<bool>(false);
  gen->add_option("--model", *model_name, "mixtral-8x7b, deepseek-v2-lite or qwen1.5-moe")
      ->capture_default_str();
  gen->add_option("--out", *out_path, "Trace file to write")->required();
  gen->add_option("--seed", *seed, "Random seed (same seed, same trace)")->capture_default_str();
  gen->add_option("--prompts", *prompts, "Prompts decoded one after another (0: the preset's)");
  gen->add_flag("--partial-probs", *partial, "Record only the chosen experts' gate weights");
  gen->callback([=] {
    auto m = es::SyntheticRouterPreset(*model_name);
    if (!m.ok()) Fail(2, "--model: " + std::string(m.status().message()));
    if (*prompts < 0) Fail(2, "--prompts must be >= 0");
    if (*prompts > 0) m->prompts = *prompts;
    m->partial_probs = *partial;
    auto t = es::SynthesizeTrace(*m, *seed);
    if (!t.ok()) Fail(2, std::string(t.status().message()));
    auto w = es::RoutingTraceWriter::Open(*out_path, t->header);
    if (!w.ok()) Fail(1, std::string(w.status().message()));
    for (const auto& r : t->records) (*w)->Write(r);
    if (auto st = (*w)->Flush(); !st.ok()) Fail(1, std::string(st.message()));
    const es::RoutingStats s = es::MeasureRouting(*t);
    const size_t L = s.repeat_first.size();
    std::printf("%s: %llu records (%d layers x %d experts, top-%d, seed %llu) -> %s\n",
                m->name.c_str(), static_cast<unsigned long long>(t->records.size()), m->n_layers,
                m->n_experts, m->top_k, static_cast<unsigned long long>(*seed), out_path->c_str());
    std::printf(
        "same first choice as the previous token: %s / %s / %s (layers 0, %zu, %zu); top-k "
        "overlap: %s / %s / "
        "%s; depth-1 lookahead precision %s\n",
        Pct(s.repeat_first[0]).c_str(), Pct(s.repeat_first[L / 2]).c_str(),
        Pct(s.repeat_first[L - 1]).c_str(), L / 2, L - 1, Pct(s.repeat_any[0]).c_str(),
        Pct(s.repeat_any[L / 2]).c_str(), Pct(s.repeat_any[L - 1]).c_str(),
        Pct(s.lookahead_precision).c_str());
    Exit(0);
  });
}
