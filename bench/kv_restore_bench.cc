// Decode rate of one request while other conversations are restored from persisted KV
// (--kv-persist-dir) in the same engine: does a disk read of a KV file stall the batch?
//
// A synthetic MoE model (CPU backend) first runs --restores conversations and shuts down, so
// their caches are persisted, one file each. A new engine over the same directory then decodes
// --tokens tokens of a steady request, once alone and once while the next turn of every
// persisted conversation arrives, one after another: each is read back from disk. The read of
// a file is held --read-ms first (what reading a long conversation of a large model from an
// NVMe takes; this model's own files are small and in the page cache).
// Usage: kv_restore_bench [--read-ms 100] [--restores 8] [--tokens 1024] [--threads 2]
//                         [--layers 8] [--hidden 256] [--experts 16] [--dir /tmp/x]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "colibri/backend/cpu_backend.h"
#include "colibri/core/logging.h"
#include "colibri/engine/engine.h"
#include "colibri/engine/kv_store.h"
#include "colibri/model/container.h"
#include "colibri/model/synthetic_model.h"
#include "colibri/store/striped_source.h"

namespace {

namespace fs = std::filesystem;
using colibri::engine::Engine;
using colibri::engine::GenerationRequest;
using colibri::engine::KvStore;
using colibri::engine::KvStoreOptions;
using Clock = std::chrono::steady_clock;

int Fail(const std::string& what) {
  std::fprintf(stderr, "kv_restore_bench: %s\n", what.c_str());
  return 1;
}

GenerationRequest Greedy(std::vector<int32_t> prompt, int64_t n) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = n;
  r.ignore_eos = true;
  return r;
}

// A prompt of `n` tokens that no other conversation shares a prefix with.
std::vector<int32_t> Prompt(int32_t first, int n, int32_t vocab) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((first + 7 * i) % vocab);
  return p;
}

struct DecodeRate {
  double tok_s = 0;
  double longest_gap_ms = 0;  // between two consecutive tokens
  std::vector<int32_t> tokens;
};

// Decodes `r` and times its tokens after the first (the first ends the prefill).
absl::StatusOr<DecodeRate> TimedDecode(Engine& e, const GenerationRequest& r) {
  std::vector<Clock::time_point> at;
  auto res = e.Generate(r, [&](const colibri::generation::SampledToken&) {
    at.push_back(Clock::now());
    return true;
  });
  if (!res.ok()) return res.status();
  if (at.size() < 2) return absl::InternalError("fewer than 2 tokens decoded");
  const double s = std::chrono::duration<double>(at.back() - at.front()).count();
  double gap = 0;
  for (size_t i = 1; i < at.size(); ++i)
    gap = std::max(gap, std::chrono::duration<double, std::milli>(at[i] - at[i - 1]).count());
  return DecodeRate{static_cast<double>(at.size() - 1) / s, gap, std::move(res->tokens)};
}

// The steady request alone, then during the next turns of the persisted conversations.
int Measure(colibri::engine::Model* model, KvStoreOptions store_options,
            const std::vector<std::vector<int32_t>>& next_turns, const GenerationRequest& steady,
            int read_ms, std::atomic<bool>* hold_reads) {
  const int restores = static_cast<int>(next_turns.size());
  auto store = KvStore::Open(std::move(store_options));
  if (!store.ok()) return Fail(std::string(store.status().message()));
  if ((*store)->stats().disk_entries != static_cast<uint64_t>(restores))
    return Fail("the conversations were not persisted");
  Engine e(model, {.kv_store = store->get()});
  // A first run warms the page cache and the allocator; each run starts without pooled KV.
  if (auto warm = TimedDecode(e, steady); !warm.ok())
    return Fail(std::string(warm.status().message()));
  e.ClearKvPool();
  auto alone = TimedDecode(e, steady);
  if (!alone.ok()) return Fail(std::string(alone.status().message()));
  e.ClearKvPool();

  *hold_reads = true;
  std::atomic<bool> steady_done{false};
  std::atomic<int> restored_during = 0, cached_tokens = 0;
  double restore_seconds = 0;
  std::thread turns([&] {
    const auto start = Clock::now();
    for (const auto& p : next_turns) {
      auto r = e.Generate(Greedy(p, 1), [](const auto&) { return true; });
      if (r.ok()) cached_tokens += static_cast<int>(r->cached_prompt_tokens);
      if (!steady_done) restored_during++;
    }
    restore_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  });
  auto with = TimedDecode(e, steady);
  steady_done = true;
  turns.join();
  if (!with.ok()) return Fail(std::string(with.status().message()));
  if (with->tokens != alone->tokens)
    return Fail("the restores changed the steady request's tokens");
  std::printf("decode alone                    %8.1f tok/s (%zu tokens), longest gap %.1f ms\n",
              alone->tok_s, alone->tokens.size(), alone->longest_gap_ms);
  std::printf(
      "decode during %d disk restores  %8.1f tok/s (%.2fx), longest gap %.1f ms; each read held "
      "%d ms, %d restores finished during the decode, all %d in %.2f s, %d prompt tokens "
      "restored\n",
      restores, with->tok_s, with->tok_s / alone->tok_s, with->longest_gap_ms, read_ms,
      restored_during.load(), restores, restore_seconds, cached_tokens.load());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  colibri::InitLogging("warn");
  int read_ms = 100, restores = 8, tokens = 1024, threads = 2, prompt_len = 48;
  int64_t layers = 8, hidden = 256, experts = 16;
  std::string dir = (fs::temp_directory_path() / "colibri-kv-restore-bench").string();
  CLI::App app{"kv_restore_bench: decode rate while persisted KV caches are restored"};
  app.add_option("--read-ms", read_ms, "each KV file read is held this long first");
  app.add_option("--restores", restores, "conversations restored during the decode");
  app.add_option("--tokens", tokens, "tokens of the steady request");
  app.add_option("--threads", threads, "CPU backend threads");
  app.add_option("--prompt", prompt_len, "prompt tokens of each conversation");
  app.add_option("--layers", layers);
  app.add_option("--hidden", hidden);
  app.add_option("--experts", experts);
  app.add_option("--dir", dir, "scratch directory (removed at the end)");
  CLI11_PARSE(app, argc, argv);

  colibri::model::SyntheticModelOptions mo;
  mo.name = "kv-restore-bench";
  mo.config = colibri::model::DefaultSyntheticConfig();
  auto& c = mo.config;
  c.n_layers = layers;
  c.hidden_size = hidden;
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.head_dim = hidden / 8;
  c.expert_ffn = 2 * hidden;
  c.n_experts = experts;
  c.top_k = 2;
  c.vocab_size = 512;
  c.context_length = 2048;
  mo.dtype = colibri::quant::DType::kQ8_0;
  mo.residual_scale = 0.5f;
  const fs::path root(dir), model_dir = root / "model", kv_dir = root / "kv";
  std::error_code ec;
  fs::remove_all(root, ec);
  if (absl::Status st = colibri::model::WriteSyntheticModel(model_dir, mo); !st.ok())
    return Fail(std::string(st.message()));
  auto container = colibri::model::Container::Open(model_dir);
  if (!container.ok()) return Fail(std::string(container.status().message()));
  auto disk = colibri::store::StripedSource::OpenLocal(container->get(), {});
  if (!disk.ok()) return Fail(std::string(disk.status().message()));
  auto backend = colibri::backend::CreateCpuBackend({.threads = threads});
  auto model = colibri::engine::Model::Load(**container, backend.get(), disk->get());
  if (!model.ok()) return Fail(std::string(model.status().message()));
  std::printf("kv_restore_bench: %d layers, hidden %lld, %lld experts, %d threads\n",
              static_cast<int>(layers), static_cast<long long>(hidden),
              static_cast<long long>(experts), threads);

  std::atomic<bool> hold_reads{false};
  std::atomic<int> reads{0};
  auto store_options = [&] {
    KvStoreOptions o;
    o.ram_limit = 0;  // every cache the pool evicts goes straight to disk
    o.dir = kv_dir;
    o.model_fingerprint = "kv-restore-bench";
    o.n_layers = c.n_layers;
    o.kv_dim = c.n_kv_heads * c.head_dim;
    o.before_disk_read = [&](const fs::path&) {
      reads++;
      if (hold_reads) std::this_thread::sleep_for(std::chrono::milliseconds(read_ms));
    };
    return o;
  };
  const auto V = static_cast<int32_t>(c.vocab_size);
  // The conversations, persisted at shutdown.
  std::vector<std::vector<int32_t>> next_turns;
  {
    auto store = KvStore::Open(store_options());
    if (!store.ok()) return Fail(std::string(store.status().message()));
    Engine e(model->get(), {.kv_store = store->get()});
    for (int i = 0; i < restores; ++i) {
      std::vector<int32_t> p = Prompt(100 + 3 * i, prompt_len, V);
      auto r = e.Generate(Greedy(p, 8), [](const auto&) { return true; });
      if (!r.ok()) return Fail(std::string(r.status().message()));
      p.insert(p.end(), r->tokens.begin(), r->tokens.end());
      p.push_back(5);
      next_turns.push_back(std::move(p));
    }
  }
  const int rc = Measure(model->get(), store_options(), next_turns,
                         Greedy(Prompt(1, 16, V), tokens), read_ms, &hold_reads);
  fs::remove_all(root, ec);
  if (rc == 0 && reads.load() < restores) return Fail("the restores did not read from disk");
  return rc;
}
