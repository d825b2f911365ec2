// colibri-expert-store: serves expert blocks from striped disks (and/or plain model
// directories) over gRPC, and manages what the disks hold.
//
//   colibri-expert-store --disk D1 --disk D2 [--model DIR] [serving flags]   serve
//   colibri-expert-store import --model DIR --disk D1 --disk D2 [--stripe-size 512K]
//   colibri-expert-store list --disk D1 --disk D2
//   colibri-expert-store remove --disk D1 --disk D2 NAME
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
#include "colibri/auth/flags.h"
#include "colibri/core/logging.h"
#include "colibri/core/port_file.h"
#include "colibri/core/progress.h"
#include "colibri/core/signals.h"
#include "colibri/core/units.h"
#include "colibri/metrics/metrics.h"
#include "colibri/store/block_store.h"
#include "colibri/store/ingest.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "spdlog/spdlog.h"
#include "src/store_service.h"

namespace {

namespace fs = std::filesystem;

struct ServeConfig {
  std::vector<std::string> models;
  std::vector<std::string> disks;
  std::string catalog;
  std::vector<std::string> listen = {"127.0.0.1:50051"};
  std::string metrics_listen_host = "127.0.0.1";
  int metrics_port = 9101;
  std::string chunk_size = "1M";
  std::string read_cache_size = "0";
  std::string max_buffered = "64M";
  int queue_depth = 32;
  int max_reads_in_flight = 16;
  int max_queued = 1024;
  int max_streams = 256;
  int max_streams_per_client = 64;
  double idle_stream_timeout_s = 300;
  int io_threads = 0;  // accepted for compatibility; the I/O engine sizes itself by --queue-depth
  std::string io_backend = "auto";
  bool no_direct_io = false;
  bool no_shm = false;
  std::vector<std::string> faults;
  std::string port_file;
  std::string metrics_port_file;
  colibri::auth::KeyFlags keys;
  colibri::auth::TlsFiles tls;
};

std::vector<fs::path> Paths(const std::vector<std::string>& v) { return {v.begin(), v.end()}; }

int Fail(const absl::Status& s) {
  spdlog::error("{}", std::string(s.message()));
  return 1;
}

int Serve(const ServeConfig& cfg) {
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
  auto security = colibri::auth::LoadSecurity(cfg.keys, cfg.tls);
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
  options.max_queued = static_cast<size_t>(std::max(1, cfg.max_queued));
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
  std::unique_ptr<colibri::metrics::MetricsServer> metrics_server;
  if (cfg.metrics_port >= 0) {
    auto ms = colibri::metrics::MetricsServer::Start(
        cfg.metrics_listen_host, cfg.metrics_port, registry, [&] { metrics.Refresh(**store); }, {},
        security->http());
    if (!ms.ok()) return Fail(ms.status());
    metrics_server = std::move(*ms);
    if (auto st = colibri::WritePortFile(cfg.metrics_port_file, metrics_server->port()); !st.ok())
      return Fail(st);
  }
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
               colibri::FormatSize(*cache), metrics_server ? metrics_server->port() : -1);
  int sig = colibri::WaitForShutdownSignal();
  spdlog::info("signal {}: shutting down", sig);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  for (const auto& l : cfg.listen) {
    if (l.rfind("unix:", 0) == 0) ::unlink(l.substr(5).c_str());
  }
  return 0;
}

int Import(const std::string& model, const colibri::store::StoreLocation& loc,
           const std::string& stripe, const std::string& name, const std::string& layers) {
  colibri::store::ImportOptions o;
  auto s = colibri::ParseSize(stripe);
  if (!s.ok()) return Fail(s.status());
  o.stripe_size = *s;
  o.name = name;
  if (!layers.empty()) {
    std::pair<std::string, std::string> ab = absl::StrSplit(layers, absl::MaxSplits('-', 1));
    if (!absl::SimpleAtoi(ab.first, &o.first_layer) ||
        !absl::SimpleAtoi(ab.second, &o.last_layer)) {
      spdlog::error("--layers must be FIRST-LAST, e.g. 0-15");
      return 2;
    }
  }
  colibri::ProgressMeter meter("import", stderr, isatty(fileno(stderr)));
  o.progress = [&](uint64_t done, uint64_t total) { meter.Update(done, total); };
  const auto t0 = std::chrono::steady_clock::now();
  auto r = colibri::store::ImportModel(model, loc, o);
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
  ServeConfig cfg;
  CLI::App app{
      "colibri-expert-store: serves expert blocks from striped disks over ExpertStore.Fetch"};
  app.require_subcommand(0, 1);
  app.add_option("--disk", cfg.disks, "A disk root of the store (repeatable, any order)");
  app.add_option("--catalog", cfg.catalog, "The catalog directory (default: found on the disks)");
  app.add_option("--model", cfg.models, "Also serve this model directory as it is (repeatable)")
      ->check(CLI::ExistingDirectory);
  app.add_option("--listen", cfg.listen,
                 "Address: host:port (port 0 picks one) or unix:/path (repeatable)")
      ->capture_default_str();
  app.add_option("--metrics-port", cfg.metrics_port,
                 "Prometheus /metrics port (0 picks one, -1 disables)")
      ->capture_default_str();
  app.add_option("--metrics-host", cfg.metrics_listen_host,
                 "Bind address of the metrics port (0.0.0.0: every interface)")
      ->capture_default_str();
  colibri::auth::AddKeyFlags(&app, &cfg.keys);
  colibri::auth::AddTlsFlags(&app, &cfg.tls);
  app.add_option("--read-cache-size", cfg.read_cache_size,
                 "RAM cache of recently read blocks (0: none)")
      ->capture_default_str();
  app.add_option("--queue-depth", cfg.queue_depth, "Reads in flight per disk")
      ->capture_default_str();
  app.add_option("--chunk-size", cfg.chunk_size, "Bytes per streamed chunk (1M..4M)")
      ->capture_default_str();
  app.add_option("--max-reads-in-flight", cfg.max_reads_in_flight,
                 "Block reads in progress per stream")
      ->capture_default_str();
  app.add_option("--max-buffered", cfg.max_buffered,
                 "Read bytes waiting for the network per stream")
      ->capture_default_str();
  app.add_option("--max-queued-requests", cfg.max_queued,
                 "Requests queued per stream (RESOURCE_EXHAUSTED past it)")
      ->capture_default_str();
  app.add_option("--max-streams", cfg.max_streams,
                 "Open Fetch streams (RESOURCE_EXHAUSTED past it)")
      ->capture_default_str();
  app.add_option("--max-streams-per-client", cfg.max_streams_per_client,
                 "Open Fetch streams from one peer host (RESOURCE_EXHAUSTED past it)")
      ->capture_default_str();
  app.add_option(
         "--idle-stream-timeout", cfg.idle_stream_timeout_s,
         "Seconds a Fetch stream may go without a request before the store ends it (0: never)")
      ->capture_default_str();
  app.add_flag("--no-shm", cfg.no_shm, "Refuse shared-memory delivery to co-located clients");
  app.add_option("--port-file", cfg.port_file,
                 "Write the bound TCP port (0: unix only) here once serving");
  app.add_option("--metrics-port-file", cfg.metrics_port_file,
                 "Write the bound metrics port to this file");
  auto* tuning = app.add_option_group("Testing and tuning");
  tuning->add_option("--io-backend", cfg.io_backend, "auto | io_uring | threads")
      ->capture_default_str();
  tuning->add_flag("--no-direct-io", cfg.no_direct_io,
                   "Read through the page cache instead of O_DIRECT");
  tuning->add_option(
      "--inject-fault", cfg.faults,
      "Fault injection for tests: kind=eio|short|eof|corrupt[,disk=N][,offset=A-B][,count=N] or "
      "kind=slow,disk=N,rate=100M (repeatable)");
  tuning->add_option("--io-threads", cfg.io_threads,
                     "Ignored (kept for old scripts; see --queue-depth)");

  std::string imp_model, imp_name, imp_layers;
  std::string imp_stripe = std::to_string(colibri::store::kDefaultStripeSize / 1024) + "K";
  std::vector<std::string> sub_disks;
  std::string sub_catalog;
  auto* imp = app.add_subcommand(
      "import", "Stripe a converted model directory onto the disks (atomic, resumable)");
  imp->add_option("--model", imp_model, "Converted model directory")
      ->required()
      ->check(CLI::ExistingDirectory);
  imp->add_option("--disk", sub_disks,
                  "A disk root (repeatable; the first import creates the store)")
      ->required();
  imp->add_option("--catalog", sub_catalog, "Catalog directory (default: on the first disk)");
  imp->add_option("--stripe-size", imp_stripe, "Stripe unit (multiple of 4K)")
      ->capture_default_str();
  imp->add_option("--name", imp_name, "Name in the store (default: the model's)");
  imp->add_option("--layers", imp_layers, "Hold only layers FIRST-LAST (a partial copy)");
  auto* lst = app.add_subcommand("list", "List the models on the disks");
  lst->add_option("--disk", sub_disks, "A disk root (repeatable)")->required();
  lst->add_option("--catalog", sub_catalog, "Catalog directory (default: found on the disks)");
  std::string rm_name;
  auto* rm = app.add_subcommand("remove", "Remove a model from the disks");
  rm->add_option("--disk", sub_disks, "A disk root (repeatable)")->required();
  rm->add_option("--catalog", sub_catalog, "Catalog directory (default: found on the disks)");
  rm->add_option("name", rm_name, "Model name")->required();
  CLI11_PARSE(app, argc, argv);

  const colibri::store::StoreLocation loc{Paths(sub_disks), sub_catalog};
  if (*imp) return Import(imp_model, loc, imp_stripe, imp_name, imp_layers);
  if (*lst) return List(loc);
  if (*rm) {
    if (auto st = colibri::store::RemoveModel(loc, rm_name); !st.ok()) return Fail(st);
    spdlog::info("removed '{}'", rm_name);
    return 0;
  }
  return Serve(cfg);
}
