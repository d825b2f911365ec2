// End-to-end decode with experts streamed from disk through the expert cache, against an
// "mmap everything" baseline and the disk-bound limit. bench/expert_cache_bench.py drives it
// (memory cgroup, page-cache drops, tables); each subcommand prints one JSON object.
//
//   expert_cache_bench build --dir D [--layers 32 --hidden 2048 --ffn 5632 --experts 8 --top-k 2
//                               --quant q4_k]      a synthetic Mixtral-shaped model (several GB)
//   expert_cache_bench disk --dir D [--threads 4 --gib 2]
//       disk bandwidth for whole expert blocks in random order, O_DIRECT, `threads` reads at once
//   expert_cache_bench run --dir D --mode colibri|mmap [--cache-size 1.25G --prefetch-layers 1
//                             --policy routing --io-threads 4 --tokens 40 --warmup 8 --threads 2]
//       one token per forward pass (a fixed pseudo-random token stream, the same in every run, so
//       runs route alike): decode tokens/s after `warmup` tokens, bytes read from storage per
//       token (/proc/self/io), hit rate, prefetch precision and coverage, stall per token.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench_measure.h"
#include "colibri/backend/cpu_backend.h"
#include "colibri/core/block_arena.h"
#include "colibri/core/logging.h"
#include "colibri/core/thread_pool.h"
#include "colibri/core/units.h"
#include "colibri/engine/model.h"
#include "colibri/expert_source/mmap_source.h"
#include "colibri/model/container.h"
#include "colibri/model/synthetic_model.h"
#include "colibri/store/striped_source.h"
#include "expert_cache.h"
#include "nlohmann/json.hpp"

namespace {

namespace es = colibri::expert_source;
using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

int Fail(const std::string& what) {
  std::fprintf(stderr, "error: %s\n", what.c_str());
  return 1;
}

// Bytes this process had read from storage (page-cache misses and direct I/O).
uint64_t StorageReadBytes() {
  std::ifstream in("/proc/self/io");
  std::string key;
  uint64_t value = 0;
  while (in >> key >> value) {
    if (key == "read_bytes:") return value;
  }
  return 0;
}

struct BuildFlags {
  std::string dir;
  int64_t layers = 32, hidden = 2048, ffn = 5632, experts = 8, top_k = 2, vocab = 32000;
  std::string quant = "q4_k";
  std::string tokenizer_from;  // a container whose tokenizer is copied in (servers need one)
};

int Build(const BuildFlags& f) {
  auto dt = colibri::quant::ParseDType(f.quant);
  if (!dt.ok()) return Fail(std::string(dt.status().message()));
  colibri::model::SyntheticModelOptions o;
  o.name = "mixtral-shaped-bench";
  auto& c = o.config;
  c.hidden_size = f.hidden;
  c.n_layers = f.layers;
  c.n_heads = 16;
  c.n_kv_heads = 4;
  c.head_dim = f.hidden / 16;
  c.expert_ffn = f.ffn;
  c.n_experts = f.experts;
  c.top_k = f.top_k;
  c.vocab_size = f.vocab;
  c.context_length = 4096;
  c.eos_token_ids = {2};
  o.dtype = *dt;
  o.tokenizer_from = f.tokenizer_from;
  o.seed = 7;
  // Trained models change the residual stream little per layer and share directions across
  // tokens; these make the random model route with that kind of locality.
  o.residual_scale = 0.5f;
  o.embedding_shared = 0.6f;
  const auto t0 = Clock::now();
  if (auto st = colibri::model::WriteSyntheticModel(f.dir, o); !st.ok())
    return Fail(std::string(st.message()));
  auto container = colibri::model::Container::Open(f.dir);
  if (!container.ok()) return Fail(std::string(container.status().message()));
  const auto& m = (*container)->manifest();
  Json out{{"dir", f.dir},
           {"seconds", Seconds(Clock::now() - t0)},
           {"dense_bytes", m.dense_size},
           {"expert_bytes", m.TotalExpertBytes()},
           {"expert_blocks", m.experts.size()},
           {"block_bytes", m.experts[0].padded_size}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

struct DiskFlags {
  std::string dir;
  int threads = 4;
  double gib = 2;
};

int Disk(const DiskFlags& f) {
  auto container = colibri::model::Container::Open(f.dir);
  if (!container.ok()) return Fail(std::string(container.status().message()));
  auto r = colibri::bench::ReadExpertBlocks(**container, f.threads, f.gib);
  if (!r.ok()) return Fail(std::string(r.status().message()));
  Json out{{"threads", f.threads},
           {"direct_io", r->direct_io},
           {"bytes", r->bytes},
           {"seconds", r->seconds},
           {"bandwidth_bytes_per_second", r->bandwidth()}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

struct RunFlags {
  std::string dir;
  std::string mode = "colibri";
  std::string cache_size = "1.25G";
  int prefetch_layers = 1;
  std::string policy{colibri::expert_source::kDefaultCachePolicyName};
  int io_threads = 4;
  int prefetch_reads = 0;
  float prefetch_min_weight = 0;
  bool direct_io = true;
  double learned_pins = 0.25;
  int tokens = 40;
  int warmup = 8;
  int threads = 0;
  std::string trace_out;
};

int RunDecode(const RunFlags& f) {
  auto container = colibri::model::Container::Open(f.dir);
  if (!container.ok()) return Fail(std::string(container.status().message()));
  const auto& m = (*container)->manifest();
  auto backend = colibri::backend::CreateCpuBackend(
      {.threads = f.threads > 0 ? f.threads : colibri::UsableCoreCount()});
  std::unique_ptr<es::ExpertSource> origin;
  colibri::store::StripedSource* disk = nullptr;
  std::unique_ptr<colibri::compute::ExpertCache> cache;
  es::ExpertSource* front = nullptr;
  if (f.mode == "mmap") {
    auto src = es::MmapSource::Open(container->get());
    if (!src.ok()) return Fail(std::string(src.status().message()));
    origin = std::move(*src);
    front = origin.get();
  } else if (f.mode == "colibri") {
    auto src =
        colibri::store::StripedSource::OpenLocal(container->get(), {.direct_io = f.direct_io});
    if (!src.ok()) return Fail(std::string(src.status().message()));
    disk = src->get();
    origin = std::move(*src);
    auto bytes = colibri::ParseSize(f.cache_size);
    if (!bytes.ok()) return Fail(std::string(bytes.status().message()));
    colibri::compute::ExpertCacheConfig cc;
    cc.policy = f.policy;
    cc.prefetch_layers = f.prefetch_layers;
    cc.io_threads = f.io_threads;
    cc.max_prefetch_reads = f.prefetch_reads;
    cc.direct_io = f.direct_io;
    cc.routing_heat = "none";  // every run starts cold: no heat learned by an earlier run
    cc.learned_pin_fraction = f.learned_pins;
    cc.trace_out = f.trace_out;
    auto c =
        colibri::compute::ExpertCache::Create(origin.get(), **container, *bytes, cc, backend.get());
    if (!c.ok()) return Fail(std::string(c.status().message()));
    cache = std::move(*c);
    front = cache->front();
  } else {
    return Fail("--mode must be colibri or mmap");
  }
  colibri::engine::ModelOptions mo;
  mo.prefetch_layers = f.mode == "colibri" ? f.prefetch_layers : 0;
  mo.trace = cache ? cache->trace() : nullptr;
  mo.prefetch_min_weight = f.prefetch_min_weight;
  auto model = colibri::engine::Model::Load(**container, backend.get(), front, mo);
  if (!model.ok()) return Fail(std::string(model.status().message()));

  // The token stream: fixed, pseudo-random, the same for every run.
  std::mt19937 rng(11);
  auto kv = (*model)->NewCache();
  std::vector<float> logits;
  std::vector<double> per_token;
  uint64_t read_at_warmup = 0, wait_at_warmup = 0;
  es::CacheStats stats_at_warmup;
  const auto& counters = (*model)->counters();
  Clock::time_point t_warm;
  for (int t = 0; t < f.tokens; ++t) {
    if (t == f.warmup) {
      read_at_warmup = StorageReadBytes();
      wait_at_warmup = counters.expert_wait_ns.load();
      if (cache) stats_at_warmup = cache->ram().Stats();
      t_warm = Clock::now();
    }
    colibri::engine::BatchItem item{kv.get(),
                                    static_cast<int32_t>(3 + rng() % (m.config.vocab_size - 3)),
                                    static_cast<int32_t>(t), true};
    logits.clear();
    const auto t0 = Clock::now();
    if (auto st = (*model)->Forward(std::span<const colibri::engine::BatchItem>(&item, 1), &logits);
        !st.ok()) {
      return Fail(std::string(st.message()));
    }
    per_token.push_back(Seconds(Clock::now() - t0));
  }
  const double measured = Seconds(Clock::now() - t_warm);
  const int n = f.tokens - f.warmup;
  const double read = static_cast<double>(StorageReadBytes() - read_at_warmup);
  Json out{{"mode", f.mode},
           {"tokens", n},
           {"tok_s", n / measured},
           {"ms_per_token", 1e3 * measured / n},
           {"storage_bytes_per_token", read / n},
           {"stall_ms_per_token",
            1e-6 * static_cast<double>(counters.expert_wait_ns.load() - wait_at_warmup) / n},
           {"peak_rss_bytes", colibri::PeakResidentBytes()},
           {"dense_bytes", (*model)->dense_bytes()}};
  if (cache) {
    const es::CacheStats s = cache->ram().Stats();
    const double lookups = static_cast<double>(s.lookups() - stats_at_warmup.lookups());
    const double reads = static_cast<double>(s.prefetch_reads - stats_at_warmup.prefetch_reads);
    out["cache_size"] = f.cache_size;
    out["policy"] = f.policy;
    out["prefetch_layers"] = f.prefetch_layers;
    out["hit_rate"] =
        lookups > 0 ? static_cast<double>(s.hits - stats_at_warmup.hits) / lookups : 0.0;
    out["coverage"] = lookups > 0
                          ? static_cast<double>(s.hits + s.in_flight_hits - stats_at_warmup.hits -
                                                stats_at_warmup.in_flight_hits) /
                                lookups
                          : 0.0;
    out["prefetch_precision"] =
        reads > 0 ? static_cast<double>(s.prefetch_used - stats_at_warmup.prefetch_used) / reads
                  : 0.0;
    // Every demanded block that was not resident had to come from the disk (by a demand read,
    // or by a prefetch that was then used): the bytes this run's routing and cache needed.
    const double block = static_cast<double>(m.experts[0].padded_size);
    out["needed_bytes_per_token"] =
        static_cast<double>(s.misses + s.in_flight_hits - stats_at_warmup.misses -
                            stats_at_warmup.in_flight_hits) *
        block / n;
    out["prefetch_aborted"] = s.prefetch_aborted - stats_at_warmup.prefetch_aborted;
    out["prefetch_wasted_bytes_per_token"] =
        static_cast<double>(s.prefetch_wasted_bytes - stats_at_warmup.prefetch_wasted_bytes) / n;
    out["prediction_precision"] =
        counters.prefetch_predicted.load() > 0
            ? static_cast<double>(counters.prefetch_predicted_routed.load()) /
                  static_cast<double>(counters.prefetch_predicted.load())
            : 0.0;
    out["prediction_recall"] =
        counters.prefetch_routed.load() > 0
            ? static_cast<double>(counters.prefetch_predicted_routed.load()) /
                  static_cast<double>(counters.prefetch_routed.load())
            : 0.0;
    out["disk_bytes_read"] = disk ? disk->store().io().Stats(0).bytes : 0;
    out["direct_io"] = disk ? disk->store().io().Stats(0).direct : false;
    out["cache_peak_bytes"] = s.capacity_bytes;
  }
  std::printf("%s\n", out.dump().c_str());
  if (cache) cache->ram().WaitIdle(Clock::now() + std::chrono::seconds(30));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  colibri::InitLogging("warn");
  CLI::App app{
      "expert_cache_bench: decode with experts streamed from disk (see "
      "bench/expert_cache_bench.py)"};
  app.require_subcommand(1);
  BuildFlags bf;
  auto* build = app.add_subcommand("build", "Write the synthetic model");
  build->add_option("--dir", bf.dir)->required();
  build->add_option("--layers", bf.layers);
  build->add_option("--hidden", bf.hidden);
  build->add_option("--ffn", bf.ffn);
  build->add_option("--experts", bf.experts);
  build->add_option("--top-k", bf.top_k);
  build->add_option("--quant", bf.quant);
  build->add_option("--vocab", bf.vocab);
  build->add_option("--tokenizer-from", bf.tokenizer_from);
  DiskFlags df;
  auto* disk =
      app.add_subcommand("disk", "Disk bandwidth for expert blocks (O_DIRECT, random order)");
  disk->add_option("--dir", df.dir)->required();
  disk->add_option("--threads", df.threads);
  disk->add_option("--gib", df.gib);
  RunFlags rf;
  auto* run = app.add_subcommand("run", "Decode and measure");
  run->add_option("--dir", rf.dir)->required();
  run->add_option("--mode", rf.mode);
  run->add_option("--cache-size", rf.cache_size);
  run->add_option("--prefetch-layers", rf.prefetch_layers);
  run->add_option("--policy", rf.policy);
  run->add_option("--io-threads", rf.io_threads);
  run->add_option("--prefetch-reads", rf.prefetch_reads);
  run->add_option("--prefetch-min-weight", rf.prefetch_min_weight);
  run->add_option("--direct-io", rf.direct_io);
  run->add_option("--learned-pins", rf.learned_pins);
  run->add_option("--tokens", rf.tokens);
  run->add_option("--warmup", rf.warmup);
  run->add_option("--threads", rf.threads);
  run->add_option("--trace-out", rf.trace_out);
  CLI11_PARSE(app, argc, argv);
  if (build->parsed()) return Build(bf);
  if (disk->parsed()) return Disk(df);
  return RunDecode(rf);
}
