// Cache policy quality: hit rate of lru, lfu and routing against Belady's offline optimum on
// routing traces with different locality, at several cache sizes.
//
// Synthetic traces: per token and layer, router logits = popularity (fixed per expert, spread
// --pop) + topic (one of 8 topics, switching with probability 1/segment per token, spread
// --topic) + a per-token part that persists from token to token with correlation rho; softmax,
// top-k. Locality presets: none (uniform, memoryless), popular (skewed, memoryless), temporal
// (consecutive tokens reuse experts), topics (phases of a conversation). Recorded traces
// (--trace FILE, from --trace-out) are replayed as they are.
// Usage: cache_policy_bench [--tokens 3000] [--seed 1] [--trace FILE ...] [--sizes 10,25,50]
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

namespace {

namespace es = colibri::expert_source;

struct Locality {
  std::string name;
  double pop = 0;      // spread of the fixed per-expert popularity logits
  double topic = 0;    // spread of the topic logits
  int segment = 0;     // mean tokens per topic
  double rho = 0;      // token-to-token correlation of the per-token logits
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
    if (loc.segment > 0 && u(rng) < 1.0 / loc.segment) current_topic = static_cast<int>(rng() % kTopics);
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
        r.probs[static_cast<size_t>(e)] = static_cast<float>(std::exp(logits[static_cast<size_t>(e)].first - mx) / sum);
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

void Report(const es::Trace& t, const std::string& label, const std::vector<double>& sizes) {
  const auto accesses = es::TraceAccesses(t);
  const int L = t.header.n_layers, E = t.header.n_experts, K = t.header.top_k;
  for (double pct : sizes) {
    const uint64_t blocks = static_cast<uint64_t>(pct / 100.0 * L * E + 0.5);
    auto params = es::DefaultPolicyParams(blocks, L, E, K);
    if (g_fast_weight >= 0) params.fast_weight = g_fast_weight;
    if (g_slow_weight >= 0) params.slow_weight = g_slow_weight;
    if (g_picked_weight >= 0) params.picked_weight = g_picked_weight;
    const double belady = es::ReplayBelady(accesses, blocks).hit_rate();
    double rate[3];
    int i = 0;
    for (auto kind : {es::CachePolicyKind::kLru, es::CachePolicyKind::kLfu, es::CachePolicyKind::kRouting}) {
      rate[i++] = es::ReplayWithPolicy(accesses, blocks, kind, params).hit_rate();
    }
    std::printf("| %s | %d x %d, top-%d | %.0f%% | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %.0f%% |\n", label.c_str(), L, E,
                K, pct, 100 * rate[0], 100 * rate[1], 100 * rate[2], 100 * belady,
                belady > 0 ? 100 * rate[2] / belady : 0.0);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int tokens = 3000;
  uint64_t seed = 1;
  std::vector<std::string> traces;
  std::string sizes_text = "10,25,50";
  CLI::App app{"cache_policy_bench: cache policies vs Belady on routing traces"};
  app.add_option("--tokens", tokens, "Tokens per synthetic trace");
  app.add_option("--seed", seed);
  app.add_option("--trace", traces, "Recorded routing traces to replay as well");
  app.add_option("--sizes", sizes_text, "Cache sizes in percent of the experts");
  app.add_option("--fast-weight", g_fast_weight, "Override the routing policy's recency weight (tuning)");
  app.add_option("--slow-weight", g_slow_weight, "Override the routing policy's frequency weight (tuning)");
  app.add_option("--picked-weight", g_picked_weight, "Override the routing policy's picked weight (tuning)");
  bool synthetic = true;
  app.add_option("--synthetic", synthetic, "Run the synthetic traces");
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
  std::printf("| trace (locality) | layers x experts | cache | lru | lfu | routing | Belady | routing / Belady |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const auto& shape : synthetic ? shapes : std::vector<Shape>{}) {
    for (const auto& loc : localities) {
      Report(Synthesize(shape, loc, tokens, seed), loc.name, sizes);
    }
  }
  for (const auto& path : traces) {
    auto t = es::ReadTrace(path);
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", std::string(t.status().message()).c_str());
      return 1;
    }
    Report(*t, "recorded: " + t->header.model, sizes);
  }
  return 0;
}
