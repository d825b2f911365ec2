// colibri-cli bench: llama-bench-style throughput of a model with the current settings.
//   bench --model DIR [-p 512] [-n 128] [-r 5] [--mode cold,warm] [-o md|json] [node flags]
// For each mode and test, r repetitions: prompt processing (pp N: N prompt tokens, time to the
// first sampled token) and generation (tg N: N tokens from a one-token prompt, every forward
// pass counted), as tok/s mean ± sd, with the expert cache's hit rate, expert bytes read per
// token and the disk read rate over the timed runs. "cold" empties the expert cache and drops
// the model's files from the page cache before every repetition; "warm" first fills the cache
// with as much of the model as its budget holds, runs each test once untimed and keeps the cache. Each repetition has its own random prompt (fixed seeds) and
// the KV pool is emptied, so no prompt is served from an earlier one's KV.
// Exit status: 0 ok; 1 the model could not be loaded or run; 2 bad arguments.
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "cli_node.h"
#include "colibri/core/units.h"
#include "nlohmann/json.hpp"

namespace {

using Json = nlohmann::ordered_json;
using colibri::compute::ComputeNode;

struct BenchFlags {
  NodeFlags node;
  std::vector<int64_t> prompt_sizes = {512};
  std::vector<int64_t> gen_sizes = {128};
  int repetitions = 5;
  std::vector<std::string> modes = {"cold", "warm"};
  std::string output = "md";
  uint64_t seed = 1;
};

struct Sample {
  double seconds = 0;
  int64_t tokens = 0;
  uint64_t lookups = 0, hits = 0, bytes_read = 0;
  int64_t verify_passes = 0, draft_tokens = 0, accepted_draft_tokens = 0;  // speculative decoding
};

struct Row {
  std::string mode, test;
  int64_t n = 0;
  std::vector<Sample> samples;
  double Mean() const {
    double s = 0;
    for (const auto& x : samples) s += x.tokens / x.seconds;
    return s / static_cast<double>(samples.size());
  }
  double Sd() const {
    if (samples.size() < 2) return 0;
    const double m = Mean();
    double v = 0;
    for (const auto& x : samples) v += (x.tokens / x.seconds - m) * (x.tokens / x.seconds - m);
    return std::sqrt(v / static_cast<double>(samples.size() - 1));
  }
  Sample Sum() const {
    Sample t;
    for (const auto& x : samples) {
      t.seconds += x.seconds;
      t.tokens += x.tokens;
      t.lookups += x.lookups;
      t.hits += x.hits;
      t.bytes_read += x.bytes_read;
      t.verify_passes += x.verify_passes;
      t.draft_tokens += x.draft_tokens;
      t.accepted_draft_tokens += x.accepted_draft_tokens;
    }
    return t;
  }
};

// Drops the model's files from the page cache (advisory: the kernel keeps dirty or mapped
// pages); returns the files advised.
int DropPageCache(const std::string& dir) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir, ec)) {
    if (!e.is_regular_file(ec)) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    if (::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0) ++n;
    ::close(fd);
  }
  return n;
}

std::vector<int32_t> RandomPrompt(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = id(rng);
  return p;
}

// One timed run of a test: pp N (prompt of N, one token sampled) or tg N (N generated).
Sample RunOnce(ComputeNode& node, bool prompt_test, int64_t n, uint64_t seed) {
  const auto& config = node.manifest().config;
  colibri::engine::GenerationRequest req;
  req.prompt = RandomPrompt(prompt_test ? n : 1, config.vocab_size, seed);
  req.max_tokens = prompt_test ? 1 : n;
  req.ignore_eos = true;
  req.sampling.temperature = 0;
  node.engine().ClearKvPool();
  const auto before = node.cache_stats();
  auto r = node.engine().Generate(req, [](const colibri::engine::SampledToken&) { return true; });
  if (!r.ok()) Fail(1, std::string(r.status().message()));
  const auto after = node.cache_stats();
  Sample s;
  s.seconds = prompt_test ? r->prefill_seconds : r->prefill_seconds + r->decode_seconds;
  s.tokens = prompt_test ? n : static_cast<int64_t>(r->tokens.size());
  s.lookups = after.lookups() - before.lookups();
  s.hits = after.hits - before.hits;
  s.bytes_read = after.bytes_fetched - before.bytes_fetched;
  s.verify_passes = r->verify_passes;
  s.draft_tokens = r->draft_tokens;
  s.accepted_draft_tokens = r->accepted_draft_tokens;
  if (s.seconds <= 0) Fail(1, "a run took no measurable time");
  return s;
}

std::vector<Row> RunBench(ComputeNode& node, const BenchFlags& f) {
  std::vector<Row> rows;
  for (const std::string& mode : f.modes) {
    const bool cold = mode == "cold";
    if (!cold) {
      auto loaded = node.PreloadExperts();
      if (!loaded.ok()) Fail(1, std::string(loaded.status().message()));
    }
    for (int kind = 0; kind < 2; ++kind) {
      const bool prompt_test = kind == 0;
      for (int64_t n : prompt_test ? f.prompt_sizes : f.gen_sizes) {
        Row row{mode, absl::StrFormat("%s%d", prompt_test ? "pp" : "tg", n), n, {}};
        uint64_t seed = f.seed * 1000003 + static_cast<uint64_t>(n) * 7 + (prompt_test ? 1 : 2);
        if (!cold) RunOnce(node, prompt_test, n, seed++);  // warm-up, untimed
        for (int rep = 0; rep < f.repetitions; ++rep) {
          if (cold) {
            node.ClearCache();
            DropPageCache(f.node.options.model_dir);
          }
          row.samples.push_back(RunOnce(node, prompt_test, n, seed++));
        }
        rows.push_back(std::move(row));
      }
    }
  }
  return rows;
}

Json RowJson(const Row& r) {
  const Sample t = r.Sum();
  Json reps = Json::array();
  for (const auto& s : r.samples) reps.push_back(s.tokens / s.seconds);
  return Json{
      {"mode", r.mode},
      {"test", r.test},
      {"n_tokens", r.n},
      {"repetitions", r.samples.size()},
      {"tokens_per_second", r.Mean()},
      {"tokens_per_second_sd", r.Sd()},
      {"samples_tokens_per_second", reps},
      {"expert_hit_rate", t.lookups ? static_cast<double>(t.hits) / t.lookups : 0.0},
      {"expert_bytes_per_token", static_cast<double>(t.bytes_read) / t.tokens},
      {"disk_bytes_per_second", t.bytes_read / t.seconds},
      {"verify_passes", t.verify_passes},
      {"draft_acceptance",
       t.draft_tokens ? static_cast<double>(t.accepted_draft_tokens) / t.draft_tokens : 0.0},
      {"tokens_per_verify_pass",
       t.verify_passes
           ? static_cast<double>(t.accepted_draft_tokens + t.verify_passes) / t.verify_passes
           : 0.0}};
}

void PrintMarkdown(const std::vector<Row>& rows, const ComputeNode& node, const BenchFlags& f) {
  const auto& m = node.manifest();
  std::printf(
      "model: %s (%d layers, %d experts, top-%d; dense %s, experts %s), expert cache %s, backend "
      "%s\n\n",
      m.name.c_str(), static_cast<int>(m.config.n_layers), static_cast<int>(m.config.n_experts),
      static_cast<int>(m.config.top_k), colibri::FormatSize(m.dense_size).c_str(),
      colibri::FormatSize(m.TotalExpertBytes()).c_str(), f.node.expert_cache_size.c_str(),
      f.node.options.backend.c_str());
  std::printf("| mode | test | t/s | hit rate | expert bytes/token | disk GB/s |\n");
  std::printf("| ---- | ---: | --: | -------: | -----------------: | --------: |\n");
  for (const Row& r : rows) {
    const Json j = RowJson(r);
    std::printf(
        "| %s | %s | %.2f ± %.2f | %.1f%% | %s | %.3f |\n", r.mode.c_str(), r.test.c_str(),
        r.Mean(), r.Sd(), 100.0 * j["expert_hit_rate"].get<double>(),
        colibri::FormatSize(static_cast<uint64_t>(j["expert_bytes_per_token"].get<double>()))
            .c_str(),
        j["disk_bytes_per_second"].get<double>() / 1e9);
  }
  std::printf(
      "\n%d repetitions each; cold: expert cache emptied and page cache dropped before each\n",
      f.repetitions);
  for (const Row& r : rows) {
    const Sample t = r.Sum();
    if (t.verify_passes == 0) continue;
    std::printf(
        "speculative (--speculative %s), %s %s: %.1f%% of %ld drafted tokens accepted, %.2f tokens "
        "per pass\n",
        f.node.options.speculative.c_str(), r.mode.c_str(), r.test.c_str(),
        100.0 * static_cast<double>(t.accepted_draft_tokens) / static_cast<double>(t.draft_tokens),
        static_cast<long>(t.draft_tokens),
        static_cast<double>(t.accepted_draft_tokens + t.verify_passes) /
            static_cast<double>(t.verify_passes));
  }
}

int Bench(const BenchFlags& f) {
  for (const std::string& mode : f.modes) {
    if (mode != "cold" && mode != "warm") Fail(2, "--mode: '" + mode + "' is not cold or warm");
  }
  if (f.output != "md" && f.output != "json") Fail(2, "-o: '" + f.output + "' is not md or json");
  if (f.repetitions < 1) Fail(2, "-r: at least 1 repetition");
  std::unique_ptr<ComputeNode> created;
  if (int rc = CreateNode(f.node, &created)) throw CLI::RuntimeError(rc);
  auto node = &created;
  const int64_t context = (*node)->manifest().config.context_length;
  for (int64_t n : f.prompt_sizes) {
    if (n < 1 || n >= context)
      Fail(2, absl::StrFormat("-p %d: must be between 1 and %d (the context)", n, context - 1));
  }
  for (int64_t n : f.gen_sizes) {
    if (n < 1 || n + 1 >= context)
      Fail(2, absl::StrFormat("-n %d: must be between 1 and %d", n, context - 2));
  }
  const std::vector<Row> rows = RunBench(**node, f);
  if (f.output == "json") {
    Json out = {{"model", (*node)->manifest().name},
                {"expert_cache", f.node.expert_cache_size},
                {"results", Json::array()}};
    for (const Row& r : rows) out["results"].push_back(RowJson(r));
    std::cout << out.dump(2) << std::endl;
  } else {
    PrintMarkdown(rows, **node, f);
  }
  return 0;
}

}  // namespace

void AddBenchCommand(CLI::App& app) {
  auto f = std::make_shared<BenchFlags>();
  auto* cmd = app.add_subcommand(
      "bench", "Prompt and generation throughput (llama-bench style), cold and warm");
  AddCliNodeFlags(cmd, &f->node);
  cmd->add_option("-p,--n-prompt", f->prompt_sizes, "Prompt sizes (comma-separated)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("-n,--n-gen", f->gen_sizes, "Generation lengths (comma-separated)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("-r,--repetitions", f->repetitions, "Repetitions of each test")
      ->capture_default_str();
  cmd->add_option("--mode", f->modes, "cold, warm or both (comma-separated)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("-o,--output", f->output, "md (a table) or json")->capture_default_str();
  cmd->add_option("--seed", f->seed, "Seed of the random prompts")->capture_default_str();
  cmd->callback([f] { throw CLI::RuntimeError(Bench(*f)); });
}
