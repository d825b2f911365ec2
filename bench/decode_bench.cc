// Decode and prefill speed of the CPU engine on a synthetic Mixtral-shaped model held fully in
// RAM, against the memory-bandwidth limit measured in the same run:
//   limit tok/s = measured read bandwidth / bytes of weights touched per decoded token.
// Usage: decode_bench [--layers 16] [--hidden 2048] [--ffn 5632] [--quant q4_k] [--threads N]
//                     [--tokens 32] [--prompt 512] [--dir /tmp/x]
// Weights are random but valid GGML blocks, written straight into a colibri container.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "colibri/core/logging.h"
#include "colibri/core/thread_pool.h"
#include "colibri/model/container.h"
#include "colibri/quant/blocks.h"
#include "colibri/quant/fp16.h"
#include "colibri/quant/quantize.h"
#include "compute_node.h"
#include "synthetic_weights.h"

namespace {

using colibri::quant::DType;
namespace fs = std::filesystem;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best-of-5 multi-threaded read bandwidth over `bytes` (bytes/s).
double ReadBandwidth(size_t bytes, int threads) {
  std::vector<uint64_t> buf(bytes / 8);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = i;
  colibri::ThreadPool pool(threads);
  double best = 0;
  std::atomic<uint64_t> sink{0};
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = Now();
    pool.ParallelFor(static_cast<int64_t>(buf.size()), 1 << 16, [&](int64_t b, int64_t e) {
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      int64_t i = b;
      for (; i + 4 <= e; i += 4) {
        s0 += buf[static_cast<size_t>(i)];
        s1 += buf[static_cast<size_t>(i + 1)];
        s2 += buf[static_cast<size_t>(i + 2)];
        s3 += buf[static_cast<size_t>(i + 3)];
      }
      for (; i < e; ++i) s0 += buf[static_cast<size_t>(i)];
      sink += s0 + s1 + s2 + s3;
    });
    best = std::max(best, static_cast<double>(bytes) / (Now() - t0));
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  colibri::InitLogging("warn");
  int64_t layers = 16, hidden = 2048, ffn = 5632, vocab = 32000, experts = 8, top_k = 2, heads = 16, kv_heads = 4;
  int threads = 0, tokens = 32, prompt = 512;
  std::string quant = "q4_k", dir = (fs::temp_directory_path() / "colibri-decode-bench").string();
  CLI::App app{"decode_bench: CPU decode speed vs the memory-bandwidth limit"};
  app.add_option("--layers", layers);
  app.add_option("--hidden", hidden);
  app.add_option("--ffn", ffn);
  app.add_option("--quant", quant);
  app.add_option("--threads", threads);
  app.add_option("--tokens", tokens);
  app.add_option("--prompt", prompt);
  app.add_option("--dir", dir);
  CLI11_PARSE(app, argc, argv);
  if (threads <= 0) threads = colibri::PhysicalCoreCount();
  auto dt = colibri::quant::ParseDType(quant);
  if (!dt.ok()) {
    std::fprintf(stderr, "--quant: %s\n", std::string(dt.status().message()).c_str());
    return 2;
  }

  std::mt19937_64 rng(1);
  const colibri::model::ModelConfig c = colibri::bench::MixtralConfig(
      {.layers = layers, .hidden = hidden, .ffn = ffn, .vocab = vocab, .experts = experts, .top_k = top_k,
       .heads = heads, .kv_heads = kv_heads});
  if (!colibri::bench::WriteRandomModel(dir, "bench", c, *dt, *dt, rng).ok()) {
    std::fprintf(stderr, "cannot write the synthetic model to %s\n", dir.c_str());
    return 1;
  }
  colibri::compute::ComputeNodeOptions opt;
  opt.model_dir = dir;
  opt.threads = threads;
  opt.expert_cache_bytes = 64ull << 30;
  auto node = colibri::compute::ComputeNode::Create(opt);
  if (!node.ok()) {
    std::fprintf(stderr, "%s\n", std::string(node.status().message()).c_str());
    return 1;
  }
  const auto& m = (*node)->manifest();
  // Bytes of weights one decoded token touches: every dense matrix except the embedding table
  // (one row), and top_k expert blocks per layer.
  double touched = 0;
  for (const auto& t : m.dense) touched += t.name == "token_embd" ? static_cast<double>(t.size) / vocab : t.size;
  touched += static_cast<double>(layers * top_k) * static_cast<double>(m.experts[0].size);
  const double model_bytes = static_cast<double>(m.dense_size + m.TotalExpertBytes());

  // Every expert in RAM before measuring.
  if (auto n = (*node)->PreloadExperts(); !n.ok() || *n != layers * experts) {
    std::fprintf(stderr, "preload failed\n");
    return 1;
  }
  const auto before = (*node)->cache_stats();
  // Arrival time of every token: the median gap is the decode speed least disturbed by other
  // processes on a shared machine (the bandwidth figure is a best-of-5 for the same reason).
  std::vector<double> arrivals;
  auto noop = [&arrivals](const colibri::engine::SampledToken&) {
    arrivals.push_back(Now());
    return true;
  };

  const double bw_before = ReadBandwidth(1ull << 30, threads);
  colibri::engine::GenerationRequest req;
  for (int i = 0; i < prompt; ++i) req.prompt.push_back(3 + (i * 104729) % (static_cast<int>(vocab) - 3));
  req.max_tokens = tokens;
  req.ignore_eos = true;
  auto r = (*node)->engine().Generate(req, noop);
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", std::string(r.status().message()).c_str());
    return 1;
  }
  // The limit uses the better of two bandwidth readings taken around the run (a shared machine's
  // bandwidth drifts): the ratio errs low, never high.
  const double bw = std::max(bw_before, ReadBandwidth(1ull << 30, threads));
  const double decode_tps = (static_cast<double>(r->tokens.size()) - 1) / r->decode_seconds;
  std::vector<double> gaps;
  for (size_t i = 1; i < arrivals.size(); ++i) gaps.push_back(arrivals[i] - arrivals[i - 1]);
  std::sort(gaps.begin(), gaps.end());
  const double median_tps = gaps.empty() ? 0 : 1.0 / gaps[gaps.size() / 2];
  const double prefill_tps = static_cast<double>(prompt) / r->prefill_seconds;
  const double limit = bw / touched;
  const auto stats = (*node)->cache_stats();
  std::printf("model: %lld layers, hidden %lld, expert ffn %lld, %lld experts top-%lld, %s; %.2f GiB in RAM; %d threads\n",
              static_cast<long long>(layers), static_cast<long long>(hidden), static_cast<long long>(ffn),
              static_cast<long long>(experts), static_cast<long long>(top_k), quant.c_str(), model_bytes / (1 << 30),
              threads);
  std::printf("cache: %llu hits, %llu misses during the measured run\n\n",
              static_cast<unsigned long long>(stats.hits - before.hits),
              static_cast<unsigned long long>(stats.misses - before.misses));
  std::printf("| measure | value |\n|---|---|\n");
  std::printf("| memory read bandwidth | %.2f GB/s |\n", bw / 1e9);
  std::printf("| weights touched per decoded token | %.1f MB |\n", touched / 1e6);
  std::printf("| bandwidth limit | %.2f tok/s |\n", limit);
  std::printf("| decode (all tokens) | %.2f tok/s |\n", decode_tps);
  std::printf("| decode / limit | %.0f%% |\n", 100.0 * decode_tps / limit);
  std::printf("| decode (median token) | %.2f tok/s |\n", median_tps);
  std::printf("| decode (median token) / limit | %.0f%% |\n", 100.0 * median_tps / limit);
  std::printf("| prefill (%d-token prompt) | %.1f tok/s |\n", prompt, prefill_tps);
  fs::remove_all(dir);
  return 0;
}
