// Decode and prefill speed of the CPU engine on a synthetic MoE model, against the limits
// measured in the same run:
//   memory-bound limit tok/s = measured read bandwidth / bytes of weights touched per token
//   disk-bound limit tok/s   = measured O_DIRECT block bandwidth / expert bytes read per token
// Modes:
//   resident  every expert in RAM before measuring: a --prompt-token prefill, then --tokens
//   cold      a fresh node whose cache holds the whole model (warm start on): the rate of the
//             first --tokens tokens after a one-token prompt, nothing preloaded
//   quarter   a cache of a quarter of the expert bytes (--cache-fraction): prefill, then decode
//             after --warmup
// Usage: decode_bench [--layers 16] [--hidden 2048] [--ffn 5632] [--experts 8] [--top-k 2]
//                     [--heads 16] [--kv-heads 4] [--quant q4_k] [--dense-quant q4_k]
//                     [--mode resident] [--threads N] [--tokens 32] [--prompt 512] [--dir /tmp/x]
//                     [--prefetch-layers 1] [--temperature 0] [--fixed-threads] [--reuse] [--keep]
//                     [--json]
// Weights are random but valid GGML blocks, written straight into a colibri container.
// bench/shape_bench.py runs it over the model shapes and prints the tables.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench_measure.h"
#include "colibri/backend/host_ops.h"
#include "colibri/core/logging.h"
#include "colibri/core/thread_pool.h"
#include "colibri/model/container.h"
#include "compute_node.h"
#include "nlohmann/json.hpp"
#include "synthetic_weights.h"

namespace {

using colibri::quant::DType;
namespace fs = std::filesystem;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "decode_bench: %s\n", what.c_str());
  return 1;
}

// True when `dir` holds a model of exactly `c`'s shape (a model written by an earlier run).
bool SameShape(const std::string& dir, const colibri::model::ModelConfig& c) {
  auto container = colibri::model::Container::Open(dir);
  if (!container.ok()) return false;
  const auto& h = (*container)->manifest().config;
  return h.n_layers == c.n_layers && h.hidden_size == c.hidden_size &&
         h.expert_ffn == c.expert_ffn && h.n_experts == c.n_experts && h.top_k == c.top_k &&
         h.n_heads == c.n_heads && h.n_kv_heads == c.n_kv_heads;
}

}  // namespace

int main(int argc, char** argv) {
  colibri::InitLogging("warn");
  int64_t layers = 16, hidden = 2048, ffn = 5632, vocab = 32000, experts = 8, top_k = 2, heads = 16,
          kv_heads = 4;
  int threads = 0, tokens = 32, prompt = 512, warmup = 8, io_threads = 4, prefetch_layers = 1;
  bool reuse = false, keep = false, json = false, fixed_threads = false;
  float temperature = 0;
  double cache_fraction = 0.25;
  std::string quant = "q4_k", dense_quant, mode = "resident";
  std::string dir = (fs::temp_directory_path() / "colibri-decode-bench").string();
  CLI::App app{"decode_bench: CPU decode speed vs the memory-bandwidth and disk limits"};
  app.add_option("--layers", layers);
  app.add_option("--hidden", hidden);
  app.add_option("--ffn", ffn);
  app.add_option("--experts", experts);
  app.add_option("--top-k", top_k);
  app.add_option("--heads", heads);
  app.add_option("--kv-heads", kv_heads);
  app.add_option("--vocab", vocab);
  app.add_option("--quant", quant, "expert matrices");
  app.add_option("--dense-quant", dense_quant,
                 "embedding, attention and output (default: --quant)");
  app.add_option("--mode", mode)->check(CLI::IsMember({"resident", "cold", "quarter"}));
  app.add_option("--threads", threads);
  app.add_flag("--fixed-threads", fixed_threads, "every op on all threads (no thread choice)");
  app.add_option("--io-threads", io_threads, "cache reader threads (cold, quarter)");
  app.add_option("--prefetch-layers", prefetch_layers, "lookahead depth (0: off)");
  app.add_option("--temperature", temperature,
                 "sampling temperature (0: greedy; a random model's greedy tokens repeat, and so "
                 "does its routing: > 0 gives tokens, and routing, that vary)")
      ->check(CLI::Range(0.0f, 2.0f));
  app.add_option("--tokens", tokens);
  app.add_option("--prompt", prompt);
  app.add_option("--warmup", warmup, "quarter: decoded tokens before measuring");
  app.add_option("--cache-fraction", cache_fraction, "quarter: the share of expert bytes cached")
      ->check(CLI::Range(0.01, 1.0));
  app.add_option("--dir", dir);
  app.add_flag("--reuse", reuse, "keep a model of the same shape already in --dir");
  app.add_flag("--keep", keep, "leave the model in --dir");
  app.add_flag("--json", json, "one JSON object instead of the table");
  CLI11_PARSE(app, argc, argv);
  if (threads <= 0) threads = colibri::UsableCoreCount();
  if (dense_quant.empty()) dense_quant = quant;
  auto dt = colibri::quant::ParseDType(quant);
  if (!dt.ok()) return Fail("--quant: " + std::string(dt.status().message()));
  auto dense_dt = colibri::quant::ParseDType(dense_quant);
  if (!dense_dt.ok()) return Fail("--dense-quant: " + std::string(dense_dt.status().message()));
  if (tokens < 2 || prompt < 1 || warmup < 0 || (mode == "quarter" && warmup + 2 > tokens)) {
    return Fail("need --tokens >= 2, --prompt >= 1, and in quarter mode --tokens >= --warmup + 2");
  }

  const colibri::model::ModelConfig c = colibri::bench::MixtralConfig({.layers = layers,
                                                                       .hidden = hidden,
                                                                       .ffn = ffn,
                                                                       .vocab = vocab,
                                                                       .experts = experts,
                                                                       .top_k = top_k,
                                                                       .heads = heads,
                                                                       .kv_heads = kv_heads});
  double write_seconds = 0;
  if (!reuse || !SameShape(dir, c)) {
    std::mt19937_64 rng(1);
    const double t0 = Now();
    if (auto st = colibri::bench::WriteRandomModel(dir, "bench", c, *dt, *dense_dt, *dense_dt, rng);
        !st.ok()) {
      return Fail("cannot write the synthetic model to " + dir + ": " + std::string(st.message()));
    }
    write_seconds = Now() - t0;
  }
  auto container = colibri::model::Container::Open(dir);
  if (!container.ok()) return Fail(std::string(container.status().message()));
  const auto& m = (*container)->manifest();
  const double expert_bytes = static_cast<double>(m.TotalExpertBytes());
  const double model_bytes = static_cast<double>(m.dense_size) + expert_bytes;
  // Bytes of weights one decoded token touches: every dense matrix except the embedding table
  // (one row), and top_k expert blocks per layer.
  double touched = 0;
  for (const auto& t : m.dense)
    touched += t.name == "token_embd" ? static_cast<double>(t.size) / vocab : t.size;
  const double block_bytes = static_cast<double>(m.experts[0].size);
  touched += static_cast<double>(layers * top_k) * block_bytes;

  // The disk's bandwidth for expert blocks, read the way the cache reads misses.
  double disk_bw = 0;
  if (mode == "quarter") {
    auto r = colibri::bench::ReadExpertBlocks(**container, io_threads,
                                              std::min(1.0, expert_bytes / 2 / (1 << 30)));
    if (!r.ok()) return Fail(std::string(r.status().message()));
    disk_bw = r->bandwidth();
  }
  container->reset();

  colibri::compute::ComputeNodeOptions opt;
  opt.model_dir = dir;
  opt.threads = threads;
  opt.fixed_threads = fixed_threads;
  opt.tune_profile = "none";
  opt.cache.routing_heat = "none";  // no heat learned by an earlier run
  opt.cache.io_threads = io_threads;
  opt.cache.prefetch_layers = prefetch_layers;
  opt.kv_cache_limit = 0;
  // A cache of the whole model, or of --cache-fraction (a quarter) of its expert bytes.
  opt.expert_cache_bytes = static_cast<uint64_t>(
      mode == "quarter" ? expert_bytes * cache_fraction : expert_bytes * 1.05 + (64 << 20));
  auto node = colibri::compute::ComputeNode::Create(opt);
  if (!node.ok()) return Fail(std::string(node.status().message()));
  if (mode == "resident") {
    if (auto n = (*node)->PreloadExperts(); !n.ok() || *n != layers * experts)
      return Fail("preload failed");
  }
  const double bw_before = colibri::bench::ReadBandwidth(1ull << 30, threads);

  // Arrival time of every token: the median gap is the decode speed least disturbed by other
  // processes on a shared machine (the bandwidth figure is a best-of-5 for the same reason).
  std::vector<double> arrivals;
  uint64_t fetched_at_first = 0, fetched_at_warmup = 0;
  // Parallel regions (each a synchronisation of the worker threads) of the decode steps.
  const auto* host = dynamic_cast<const colibri::backend::HostOps*>(&(*node)->backend());
  uint64_t regions_at_first = 0, single_at_first = 0;
  auto on_token = [&](const colibri::engine::SampledToken&) {
    arrivals.push_back(Now());
    if (arrivals.size() == 1) {
      fetched_at_first = (*node)->cache_stats().bytes_fetched;
      regions_at_first = host ? host->parallel_regions() : 0;
      single_at_first = host ? host->single_threaded_calls() : 0;
    }
    if (static_cast<int>(arrivals.size()) == warmup + 1)
      fetched_at_warmup = (*node)->cache_stats().bytes_fetched;
    return true;
  };
  colibri::engine::GenerationRequest req;
  const int n_prompt = mode == "cold" ? 1 : prompt;
  for (int i = 0; i < n_prompt; ++i)
    req.prompt.push_back(3 + (i * 104729) % (static_cast<int>(vocab) - 3));
  req.max_tokens = tokens;
  req.ignore_eos = true;
  req.sampling.temperature = temperature;
  req.sampling.seed = 1;
  const auto stats_before = (*node)->cache_stats();
  const double start = Now();
  auto r = (*node)->engine().Generate(req, on_token);
  if (!r.ok()) return Fail(std::string(r.status().message()));
  const auto stats = (*node)->cache_stats();
  const double decoded_layers =
      static_cast<double>((static_cast<int64_t>(arrivals.size()) - 1) * layers);
  const double regions_per_layer =
      host ? static_cast<double>(host->parallel_regions() - regions_at_first) / decoded_layers
           : 0.0;
  // Calls that could have been parallel but ran on one thread: in passes that measured faster
  // so, and in the passes measuring that (the thread choice's first samples and exploration).
  const double single_per_layer =
      host ? static_cast<double>(host->single_threaded_calls() - single_at_first) / decoded_layers
           : 0.0;
  // The limit uses the better of two bandwidth readings taken around the run (a shared machine's
  // bandwidth drifts): the ratio errs low, never high.
  const double bw = std::max(bw_before, colibri::bench::ReadBandwidth(1ull << 30, threads));
  const double limit = bw / touched;
  std::vector<double> gaps;
  for (size_t i = 1; i < arrivals.size(); ++i) gaps.push_back(arrivals[i] - arrivals[i - 1]);
  std::sort(gaps.begin(), gaps.end());
  const double median_tps = gaps.empty() ? 0 : 1.0 / gaps[gaps.size() / 2];
  double decode_tps = (static_cast<double>(r->tokens.size()) - 1) / r->decode_seconds;
  const double prefill_tps = static_cast<double>(n_prompt) / r->prefill_seconds;
  nlohmann::ordered_json out{{"mode", mode},
                             {"layers", layers},
                             {"hidden", hidden},
                             {"ffn", ffn},
                             {"experts", experts},
                             {"top_k", top_k},
                             {"quant", quant},
                             {"dense_quant", dense_quant},
                             {"threads", threads},
                             {"model_bytes", model_bytes},
                             {"write_seconds", write_seconds},
                             {"bandwidth_bytes_per_second", bw},
                             {"touched_bytes_per_token", touched},
                             {"limit_tok_s", limit},
                             {"prefill_tokens", n_prompt},
                             {"prefill_tok_s", prefill_tps},
                             {"fixed_threads", fixed_threads},
                             {"temperature", temperature},
                             {"cache_fraction", mode == "quarter" ? cache_fraction : 1.0},
                             {"regions_per_layer", regions_per_layer},
                             {"single_threaded_per_layer", single_per_layer},
                             {"hits", stats.hits - stats_before.hits},
                             {"misses", stats.misses - stats_before.misses}};
  if (mode == "cold") {
    // Every token from the request's start: the prompt's one forward pass included.
    decode_tps = static_cast<double>(arrivals.size()) / (arrivals.back() - start);
  } else if (mode == "quarter") {
    const int measured = static_cast<int>(arrivals.size()) - 1 - warmup;
    decode_tps = measured / (arrivals.back() - arrivals[static_cast<size_t>(warmup)]);
    const double fetched = static_cast<double>(stats.bytes_fetched - fetched_at_warmup) / measured;
    const double prefill_fetched =
        static_cast<double>(fetched_at_first - stats_before.bytes_fetched);
    out["disk_bytes_per_second"] = disk_bw;
    out["fetched_bytes_per_token"] = fetched;
    out["disk_limit_tok_s"] = fetched > 0 ? disk_bw / fetched : 0.0;
    out["prefill_fetched_bytes"] = prefill_fetched;
    out["prefill_disk_limit_tok_s"] =
        prefill_fetched > 0 ? n_prompt * disk_bw / prefill_fetched : 0.0;
  }
  out["decode_tok_s"] = decode_tps;
  out["decode_median_tok_s"] = median_tps;
  if (json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf(
        "model: %lld layers, hidden %lld, expert ffn %lld, %lld experts top-%lld, %s experts, %s "
        "dense; "
        "%.2f GiB; %d threads; mode %s\n\n",
        static_cast<long long>(layers), static_cast<long long>(hidden), static_cast<long long>(ffn),
        static_cast<long long>(experts), static_cast<long long>(top_k), quant.c_str(),
        dense_quant.c_str(), model_bytes / (1 << 30), threads, mode.c_str());
    std::printf("| measure | value |\n|---|---|\n");
    std::printf("| memory read bandwidth | %.2f GB/s |\n", bw / 1e9);
    std::printf("| weights touched per decoded token | %.1f MB |\n", touched / 1e6);
    std::printf("| bandwidth limit | %.2f tok/s |\n", limit);
    std::printf("| decode | %.2f tok/s (%.0f%% of the limit) |\n", decode_tps,
                100.0 * decode_tps / limit);
    std::printf("| decode (median token) | %.2f tok/s (%.0f%%) |\n", median_tps,
                100.0 * median_tps / limit);
    std::printf("| prefill (%d-token prompt) | %.1f tok/s |\n", n_prompt, prefill_tps);
    std::printf("| parallel regions per layer and decoded token | %.1f |\n", regions_per_layer);
    std::printf("| ops on one thread per layer and token (measuring passes included) | %.1f |\n",
                single_per_layer);
    if (mode == "quarter") {
      std::printf("| disk bandwidth (blocks, O_DIRECT) | %.2f GB/s |\n", disk_bw / 1e9);
      std::printf("| expert bytes read per token | %.1f MB |\n",
                  out["fetched_bytes_per_token"].get<double>() / 1e6);
      std::printf("| disk-bound limit | %.2f tok/s |\n", out["disk_limit_tok_s"].get<double>());
    }
  }
  node->reset();
  if (!keep) fs::remove_all(dir);
  return 0;
}
