// colibri-expert-store: serves expert blocks from striped disks (and/or plain model
// directories) over gRPC, and manages what the disks hold (the commands: src/store_config.h).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "colibri/core/logging.h"
#include "colibri/core/port_file.h"
#include "colibri/core/progress.h"
#include "colibri/core/signals.h"
#include "colibri/core/units.h"
#include "colibri/metrics/listen_flags.h"
#include "colibri/store/block_store.h"
#include "colibri/store/ingest.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "spdlog/spdlog.h"
#include "store_config.h"
#include "store_service.h"

namespace {

namespace fs = std::filesystem;

std::vector<fs::path> Paths(const std::vector<std::string>& v) { return {v.begin(), v.end()}; }

int Fail(const absl::Status& s) {
  spdlog::error("{}", std::string(s.message()));
  return 1;
}

int Serve(const colibri::store::StoreConfig& cfg) {
  auto chunk = colibri::ParseSize(cfg.chunk_size);
  if (!chunk.ok() || *chunk < (1u << 20) || *chunk > (4u << 20)) {
    spdlog::error("--chunk-size must be between 1M and 4M");
    return 2;
  }
  auto cache = colibri::ParseSize(cfg.read_cache_size);
  auto buffered = colibri::ParseSize(cfg.max_buffered);
  if (!cache.ok() || !buffered.ok()) {
    spdlog::error("{}", std::string((!cache.ok() ? cache.status() : buffered.status()).message()));
    return 2;
  }
  if (cfg.models.empty() && cfg.disks.empty()) {
    spdlog::error(
        "nothing to serve: give the store's disks (--disk DIR, repeatable) and/or --model DIR");
    return 2;
  }
  colibri::store::FaultInjector faults;
  for (const auto& spec : cfg.faults) {
    if (auto st = faults.AddSpec(spec); !st.ok()) return Fail(st);
    spdlog::warn("fault injection: {}", spec);
  }
  colibri::store::BlockStoreOptions bo;
  bo.disks = Paths(cfg.disks);
  bo.catalog = cfg.catalog;
  bo.model_dirs = Paths(cfg.models);
  bo.read_cache_bytes = *cache;
  bo.io.queue_depth = std::max(1, cfg.queue_depth);
  bo.io.direct_io = !cfg.no_direct_io;
  bo.io.backend = cfg.io_backend == "io_uring"  ? colibri::store::IoEngineOptions::Backend::kIoUring
                  : cfg.io_backend == "threads" ? colibri::store::IoEngineOptions::Backend::kThreads
                                                : colibri::store::IoEngineOptions::Backend::kAuto;
  if (!cfg.faults.empty()) bo.io.faults = &faults;
  auto security = colibri::auth::LoadSecurity(cfg.security);
  if (!security.ok()) return Fail(security.status());
  std::vector<std::shared_ptr<grpc::ServerCredentials>> credentials;
  for (const auto& l : cfg.listen) {
    auto c = security->ListenerCredentials(l, nullptr);
    if (!c.ok()) {
      spdlog::error("{}", std::string(c.status().message()));
      return 2;
    }
    credentials.push_back(*c);
  }
  auto store = colibri::store::BlockStore::Open(bo);
  if (!store.ok()) return Fail(store.status());

  auto registry = std::make_shared<prometheus::Registry>();
  colibri::store::StoreMetrics metrics(registry);
  colibri::store::StoreOptions options;
  options.chunk_bytes = *chunk;
  options.max_buffered_bytes = *buffered;
  options.max_reads_in_flight = static_cast<size_t>(std::max(1, cfg.max_reads_in_flight));
  options.max_queued = static_cast<size_t>(std::max(1, cfg.max_queued_requests));
  options.max_streams = static_cast<size_t>(std::max(1, cfg.max_streams));
  options.max_streams_per_client = static_cast<size_t>(std::max(1, cfg.max_streams_per_client));
  options.idle_stream_timeout = std::chrono::milliseconds(
      static_cast<int64_t>(std::max(0.0, cfg.idle_stream_timeout_s) * 1000));
  options.allow_shm = !cfg.no_shm;
  colibri::store::ExpertStoreService service(store->get(), options, &metrics);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  std::vector<int> ports(cfg.listen.size(), 0);
  for (size_t i = 0; i < cfg.listen.size(); ++i) {
    builder.AddListeningPort(cfg.listen[i], credentials[i], &ports[i]);
  }
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  int tcp_port = 0;
  for (size_t i = 0; i < cfg.listen.size(); ++i) {
    const bool unix_socket = cfg.listen[i].rfind("unix:", 0) == 0;
    if (!server || ports[i] == 0) {
      spdlog::error("cannot listen on {}", cfg.listen[i]);
      return 1;
    }
    if (!unix_socket && tcp_port == 0) tcp_port = ports[i];
  }
  auto metrics_server = colibri::metrics::StartMetricsListener(
      cfg.metrics, registry, [&] { metrics.Refresh(**store); }, {}, security->http());
  if (!metrics_server.ok()) return Fail(metrics_server.status());
  // The port file announces readiness (0 when listening on unix sockets only).
  if (auto st = colibri::WritePortFile(cfg.port_file, tcp_port); !st.ok()) return Fail(st);
  const auto& io = (*store)->io();
  spdlog::info("I/O: {} disk(s), {}, queue depth {} per disk, {}", io.disk_count(),
               io.using_io_uring() ? "io_uring" : "pread threads", bo.io.queue_depth,
               bo.io.direct_io ? "O_DIRECT" : "buffered");
  for (const auto& m : (*store)->models()) {
    spdlog::info("serving model '{}' ({}, {} of {} layers, {} of experts)", m->name(), m->origin(),
                 m->last_layer() - m->first_layer() + 1, m->n_layers(),
                 colibri::FormatSize(m->total_expert_bytes()));
  }
  for (size_t i = 0; i < cfg.listen.size(); ++i)
    spdlog::info("listening on {} (port {})", cfg.listen[i], ports[i]);
  spdlog::info("colibri-expert-store ready (read cache {}, metrics on {})",
               colibri::FormatSize(*cache), *metrics_server ? (*metrics_server)->port() : -1);
  int sig = colibri::WaitForShutdownSignal();
  spdlog::info("signal {}: shutting down", sig);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  for (const auto& l : cfg.listen) {
    if (l.rfind("unix:", 0) == 0) ::unlink(l.substr(5).c_str());
  }
  return 0;
}

int Import(const colibri::store::StoreConfig& cfg, const colibri::store::StoreLocation& loc) {
  colibri::store::ImportOptions o;
  auto s = colibri::ParseSize(cfg.import_stripe_size);
  if (!s.ok()) return Fail(s.status());
  o.stripe_size = *s;
  o.name = cfg.import_name;
  if (!cfg.import_layers.empty()) {
    std::pair<std::string, std::string> ab =
        absl::StrSplit(cfg.import_layers, absl::MaxSplits('-', 1));
    if (!absl::SimpleAtoi(ab.first, &o.first_layer) ||
        !absl::SimpleAtoi(ab.second, &o.last_layer)) {
      spdlog::error("--layers must be FIRST-LAST, e.g. 0-15");
      return 2;
    }
  }
  colibri::ProgressMeter meter("import", stderr, isatty(fileno(stderr)));
  o.progress = [&](uint64_t done, uint64_t total) { meter.Update(done, total); };
  const auto t0 = std::chrono::steady_clock::now();
  auto r = colibri::store::ImportModel(cfg.import_model, loc, o);
  meter.Finish();
  if (!r.ok()) return Fail(r.status());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info(
      "imported '{}': {} blocks ({} resumed from an interrupted import), {} written over {} "
      "disk(s) in {:.2f} s",
      r->name, r->blocks_total, r->blocks_resumed, colibri::FormatSize(r->bytes_written),
      loc.disks.size(), secs);
  return 0;
}

int List(const colibri::store::StoreLocation& loc) {
  auto models = colibri::store::ListModels(loc);
  if (!models.ok()) return Fail(models.status());
  std::printf("%-24s %-10s %-13s %-12s %-8s %-8s %s\n", "MODEL", "STATE", "BLOCKS", "BYTES",
              "STRIPE", "LAYERS", "SOURCE");
  for (const auto& m : *models) {
    const auto& r = m.record;
    std::printf("%-24s %-10s %-13s %-12s %-8s %-8s %s\n", r.name.c_str(),
                colibri::store::ModelStateName(r.state),
                (std::to_string(m.blocks_committed) + "/" + std::to_string(r.blocks_total)).c_str(),
                colibri::FormatSize(r.total_expert_bytes).c_str(),
                colibri::FormatSize(r.stripe_size).c_str(),
                (r.full_copy() ? std::string("all")
                               : std::to_string(r.first_layer) + "-" + std::to_string(r.last_layer))
                    .c_str(),
                r.source_dir.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  colibri::BlockShutdownSignals();
  colibri::InitLogging();
  colibri::store::StoreConfig cfg;
  CLI::App app{
      "colibri-expert-store: serves expert blocks from striped disks over ExpertStore.Fetch"};
  colibri::store::AddStoreFlags(&app, &cfg);
  CLI11_PARSE(app, argc, argv);

  using Command = colibri::store::StoreConfig::Command;
  const colibri::store::StoreLocation loc{Paths(cfg.sub_disks), cfg.sub_catalog};
  switch (cfg.command) {
    case Command::kImport: return Import(cfg, loc);
    case Command::kList: return List(loc);
    case Command::kRemove:
      if (auto st = colibri::store::RemoveModel(loc, cfg.remove_name); !st.ok()) return Fail(st);
      spdlog::info("removed '{}'", cfg.remove_name);
      return 0;
    case Command::kServe: break;
  }
  return Serve(cfg);
}
