// Cache policy quality: hit rate of lru, lfu and routing against Belady's offline optimum on
// routing traces with different locality, at several cache sizes.
//
// Synthetic traces: per token and layer, router logits = popularity (fixed per expert, spread
// --pop) + topic (one of 8 topics, switching with probability 1/segment per token, spread
// --topic) + a per-token part that persists from token to token with correlation rho; softmax,
// top-k. Locality presets: none (uniform, memoryless), popular (skewed, memoryless), temporal
// (consecutive tokens reuse experts), topics (phases of a conversation). Recorded traces
// (--trace FILE, from --trace-out) are replayed as they are.
// Presets (default): traces of SynthesizeTrace (synthetic_routing.h) for each preset, seed --seed.
// Usage: cache_policy_bench [--seed 1] [--presets a b] [--partial-probs] [--trace FILE ...]
//                           [--sizes 25,50,75] [--prefetch-layers N] [--synthetic true --tokens 3000]
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "colibri/expert_source/cache_policy.h"
#include "colibri/expert_source/routing_trace.h"
#include "colibri/expert_source/synthetic_routing.h"

namespace {

namespace es = colibri::expert_source;

struct Locality {
  std::string name;
  double pop = 0;    // spread of the fixed per-expert popularity logits
  double topic = 0;  // spread of the topic logits
  int segment = 0;   // mean tokens per topic
  double rho = 0;    // token-to-token correlation of the per-token logits
};

struct Shape {
  std::string name;
  int layers, experts, top_k;
};

es::Trace Synthesize(const Shape& s, const Locality& loc, int tokens, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  const int L = s.layers, E = s.experts, K = s.top_k, kTopics = 8;
  auto table = [&](int rows, double scale) {
    std::vector<double> v(static_cast<size_t>(rows) * L * E);
    for (auto& x : v) x = scale * nd(rng);
    return v;
  };
  const std::vector<double> pop = table(1, loc.pop), topic = table(kTopics, loc.topic);
  std::vector<double> z(static_cast<size_t>(L) * E);
  for (auto& x : z) x = nd(rng);
  es::Trace t;
  t.header = {s.name + "/" + loc.name, L, E, K, 0};
  int current_topic = 0;
  std::uniform_real_distribution<double> u(0, 1);
  const double keep = std::sqrt(1 - loc.rho * loc.rho);
  std::vector<std::pair<double, int>> logits(static_cast<size_t>(E));
  for (int tok = 0; tok < tokens; ++tok) {
    if (loc.segment > 0 && u(rng) < 1.0 / loc.segment)
      current_topic = static_cast<int>(rng() % kTopics);
    for (int l = 0; l < L; ++l) {
      es::TraceRecord r;
      r.step = tok;
      r.pos = tok;
      r.layer = l;
      double mx = -1e300;
      for (int e = 0; e < E; ++e) {
        const size_t i = static_cast<size_t>(l) * E + e;
        z[i] = loc.rho * z[i] + keep * nd(rng);
        const double x = pop[i] + topic[static_cast<size_t>(current_topic) * L * E + i] + z[i];
        logits[static_cast<size_t>(e)] = {x, e};
        mx = std::max(mx, x);
      }
      double sum = 0;
      r.probs.resize(static_cast<size_t>(E));
      for (int e = 0; e < E; ++e) sum += std::exp(logits[static_cast<size_t>(e)].first - mx);
      for (int e = 0; e < E; ++e) {
        r.probs[static_cast<size_t>(e)] =
            static_cast<float>(std::exp(logits[static_cast<size_t>(e)].first - mx) / sum);
      }
      std::partial_sort(logits.begin(), logits.begin() + K, logits.end(),
                        [](const auto& a, const auto& b) { return a.first > b.first; });
      for (int k = 0; k < K; ++k) {
        r.experts.push_back(logits[static_cast<size_t>(k)].second);
        r.weights.push_back(1.0f / K);
      }
      t.records.push_back(std::move(r));
    }
  }
  return t;
}

double g_fast_weight = -1, g_slow_weight = -1, g_picked_weight = -1;  // overrides, for tuning
double g_window = -1, g_margin = -1;

constexpr es::CachePolicyKind kKinds[] = {es::CachePolicyKind::kLru, es::CachePolicyKind::kLfu,
                                          es::CachePolicyKind::kRouting,
                                          es::CachePolicyKind::kAdaptive};

// One row per cache size: every policy, Belady, the default policy with the budget split per
// layer, and (when the trace carries predictions) the default policy with lookahead prefetch.
void Report(const es::Trace& t, const std::string& label, const std::vector<double>& sizes,
            int prefetch_depth) {
  const auto accesses = es::TraceAccesses(t);
  const int L = t.header.n_layers, E = t.header.n_experts, K = t.header.top_k;
  const int depth = std::min(prefetch_depth < 0 ? t.header.lookahead_layers : prefetch_depth,
                             t.header.lookahead_layers);
  for (double pct : sizes) {
    const uint64_t blocks = static_cast<uint64_t>(pct / 100.0 * L * E + 0.5);
    auto params = es::DefaultPolicyParams(blocks, L, E, K);
    if (g_fast_weight >= 0) params.fast_weight = g_fast_weight;
    if (g_slow_weight >= 0) params.slow_weight = g_slow_weight;
    if (g_picked_weight >= 0) params.picked_weight = g_picked_weight;
    if (g_window >= 0) params.adaptive_window = g_window;
    if (g_margin >= 0) params.adaptive_margin = g_margin;
    const double belady = es::ReplayBelady(accesses, blocks).hit_rate();
    double rate[4];
    int i = 0;
    for (auto kind : kKinds)
      rate[i++] = es::ReplayWithPolicy(accesses, blocks, kind, params).hit_rate();
    const double per_layer =
        es::ReplayPerLayer(accesses, L, blocks, es::kDefaultCachePolicy, E, K).hit_rate();
    std::string prefetch = "- | - | -";
    if (depth > 0) {
      const auto p = es::ReplayWithPrefetch(accesses, blocks, es::kDefaultCachePolicy, params,
                                            depth, t.header.block_bytes);
      char buf[160];
      std::snprintf(buf, sizeof(buf), "%.1f%% (%d) | %.1f%% | %.2f", 100 * p.coverage(), depth,
                    p.prefetch_reads ? 100.0 * static_cast<double>(p.prefetch_wasted) /
                                           static_cast<double>(p.prefetch_reads)
                                     : 0.0,
                    static_cast<double>(p.wasted_bytes) / (1 << 20) /
                        (static_cast<double>(p.lookups) / (L * K)));
      prefetch = buf;
    }
    const double best_classic = std::max(rate[0], rate[1]);
    std::printf(
        "| %s | %d x %d, top-%d | %.0f%% | %.1f%% | %.1f%% | %.1f%% | **%.1f%%** | %+.1f | %.1f%% "
        "| %.0f%% | %.1f%% | %s |\n",
        label.c_str(), L, E, K, pct, 100 * rate[0], 100 * rate[1], 100 * rate[2], 100 * rate[3],
        100 * (rate[3] - best_classic), 100 * belady, belady > 0 ? 100 * rate[3] / belady : 0.0,
        100 * per_layer, prefetch.c_str());
    std::fflush(stdout);
  }
}

void PrintStats(const es::Trace& t) {
  const es::RoutingStats s = es::MeasureRouting(t);
  const size_t L = s.repeat_first.size();
  auto at = [&](const std::vector<double>& v, size_t l) { return 100 * v[std::min(l, L - 1)]; };
  std::fprintf(stderr,
               "%s: repeat first choice %.1f%% / %.1f%% / %.1f%% (layers 0, mid, last), any of "
               "top-k %.1f%% / %.1f%% / "
               "%.1f%%, top expert share %.1f%% (layer 0), depth-1 prediction precision %.1f%%\n",
               t.header.model.c_str(), at(s.repeat_first, 0), at(s.repeat_first, L / 2),
               at(s.repeat_first, L - 1), at(s.repeat_any, 0), at(s.repeat_any, L / 2),
               at(s.repeat_any, L - 1), at(s.top_expert_share, 0), 100 * s.lookahead_precision);
}

}  // namespace

int main(int argc, char** argv) {
  int tokens = 3000;
  uint64_t seed = 1;
  std::vector<std::string> traces;
  std::string sizes_text = "25,50,75";
  int prefetch_depth = -1;
  std::vector<std::string> presets;
  for (const auto& m : es::SyntheticRouterPresets()) presets.push_back(m.name);
  bool partial = false;
  // Overrides of the presets' router statistics (calibration).
  double o_pop = -1, o_prompt = -1, o_rho0 = -1, o_rho1 = -1, o_rho2 = -1, o_cross = -1,
         o_noise = -1;
  CLI::App app{"cache_policy_bench: cache policies vs Belady on routing traces"};
  app.add_option("--tokens", tokens, "Tokens per synthetic trace");
  app.add_option("--seed", seed);
  app.add_option("--trace", traces, "Recorded routing traces to replay as well");
  app.add_option("--sizes", sizes_text, "Cache sizes in percent of the experts");
  app.add_option("--fast-weight", g_fast_weight,
                 "Override the routing policy's recency weight (tuning)");
  app.add_option("--slow-weight", g_slow_weight,
                 "Override the routing policy's frequency weight (tuning)");
  app.add_option("--adaptive-window", g_window,
                 "Override the adaptive policy's window (cache turnovers)");
  app.add_option("--adaptive-margin", g_margin, "Override the adaptive policy's switching margin");
  app.add_option("--picked-weight", g_picked_weight,
                 "Override the routing policy's picked weight (tuning)");
  bool synthetic = false;
  app.add_option("--synthetic", synthetic, "Run the old hand-made locality traces too");
  app.add_option("--presets", presets,
                 "Synthetic routers with published statistics (synthetic_routing.h)");
  app.add_option("--popularity", o_pop, "Override: fixed expert logit spread");
  app.add_option("--prompt", o_prompt, "Override: per-prompt logit spread");
  app.add_option("--rho-first", o_rho0, "Override: persistence at layer 0");
  app.add_option("--rho-mid", o_rho1, "Override: persistence at the middle layer");
  app.add_option("--rho-last", o_rho2, "Override: persistence at the last layer");
  app.add_option("--cross-layer", o_cross, "Override: cross-layer correlation");
  app.add_option("--lookahead-noise", o_noise,
                 "Override: depth-1 prediction noise (depth 2: 1.5x)");
  app.add_flag("--partial-probs", partial, "Presets record only the chosen experts' gate weights");
  app.add_option("--prefetch-layers", prefetch_depth,
                 "Lookahead depth for the prefetch columns (-1: the trace's)");
  CLI11_PARSE(app, argc, argv);
  std::vector<double> sizes;
  for (auto part : absl::StrSplit(sizes_text, ',')) {
    double v;
    if (absl::SimpleAtod(part, &v)) sizes.push_back(v);
  }
  const std::vector<Locality> localities = {{"none", 0, 0, 0, 0},
                                            {"popular", 1.5, 0, 0, 0},
                                            {"temporal", 0.5, 0, 0, 0.9},
                                            {"topics", 0.5, 1.5, 200, 0.5}};
  const std::vector<Shape> shapes = {{"mixtral", 32, 8, 2}, {"olmoe", 16, 64, 8}};
  std::printf(
      "| trace | layers x experts | cache | lru | lfu | routing | adaptive | adaptive - max(lru, "
      "lfu) | Belady | "
      "adaptive / Belady | adaptive, per-layer budget | prefetch coverage (depth) | wasted "
      "prefetch reads | "
      "wasted MiB / token |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& name : presets) {
    auto m = es::SyntheticRouterPreset(name);
    if (!m.ok()) {
      std::fprintf(stderr, "%s\n", std::string(m.status().message()).c_str());
      return 2;
    }
    m->partial_probs = partial;
    if (o_pop >= 0) m->popularity = o_pop;
    if (o_prompt >= 0) m->prompt = o_prompt;
    if (o_rho0 >= 0) m->rho_first = o_rho0;
    if (o_rho1 >= 0) m->rho_mid = o_rho1;
    if (o_rho2 >= 0) m->rho_last = o_rho2;
    if (o_cross >= 0) m->cross_layer = o_cross;
    if (o_noise >= 0) m->lookahead_noise = {o_noise, 1.5 * o_noise};
    auto t = es::SynthesizeTrace(*m, seed);
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", std::string(t.status().message()).c_str());
      return 2;
    }
    PrintStats(*t);
    Report(*t, "synthetic: " + name + (partial ? " (gate weights only)" : ""), sizes,
           prefetch_depth);
  }
  for (const auto& shape : synthetic ? shapes : std::vector<Shape>{}) {
    for (const auto& loc : localities) {
      Report(Synthesize(shape, loc, tokens, seed), loc.name, sizes, prefetch_depth);
    }
  }
  for (const auto& path : traces) {
    auto t = es::ReadTrace(path);
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", std::string(t.status().message()).c_str());
      return 1;
    }
    PrintStats(*t);
    Report(*t, "recorded: " + t->header.model, sizes, prefetch_depth);
  }
  return 0;
}
