// colibri-expert-store: serves expert blocks of local model directories over gRPC.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "colibri/core/logging.h"
#include "colibri/core/port_file.h"
#include "colibri/core/signals.h"
#include "colibri/core/units.h"
#include "colibri/metrics/metrics.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "spdlog/spdlog.h"
#include "src/store_service.h"

namespace {

struct Config {
  std::vector<std::string> models;
  std::string listen = "0.0.0.0:50051";
  std::string metrics_listen_host = "0.0.0.0";
  int metrics_port = 9101;
  std::string chunk_size = "1M";
  int io_threads = 4;
  std::string port_file;
  std::string metrics_port_file;
};

}  // namespace

int main(int argc, char** argv) {
  colibri::BlockShutdownSignals();
  colibri::InitLogging();
  Config cfg;
  CLI::App app{"colibri-expert-store: serves expert blocks over ExpertStore.Fetch"};
  app.add_option("--model", cfg.models, "Model directory to serve (repeatable)")->required()->check(CLI::ExistingDirectory);
  app.add_option("--listen", cfg.listen, "gRPC address (host:port; port 0 picks one)")->capture_default_str();
  app.add_option("--metrics-port", cfg.metrics_port, "Prometheus /metrics port (0 picks one, -1 disables)")
      ->capture_default_str();
  app.add_option("--chunk-size", cfg.chunk_size, "Bytes per streamed chunk (1M..4M)")->capture_default_str();
  app.add_option("--io-threads", cfg.io_threads, "Threads reading blocks from disk")->capture_default_str();
  app.add_option("--port-file", cfg.port_file, "Write the bound gRPC port to this file");
  app.add_option("--metrics-port-file", cfg.metrics_port_file, "Write the bound metrics port to this file");
  CLI11_PARSE(app, argc, argv);

  auto chunk = colibri::ParseSize(cfg.chunk_size);
  if (!chunk.ok() || *chunk < (1u << 20) || *chunk > (4u << 20)) {
    spdlog::error("--chunk-size must be between 1M and 4M");
    return 2;
  }
  colibri::store::ModelCatalog catalog;
  for (const auto& dir : cfg.models) {
    if (auto st = catalog.AddModelDir(dir); !st.ok()) {
      spdlog::error("{}", std::string(st.message()));
      return 1;
    }
  }
  auto registry = std::make_shared<prometheus::Registry>();
  colibri::store::StoreMetrics metrics(registry);
  colibri::store::StoreOptions options;
  options.chunk_bytes = *chunk;
  options.io_threads = std::max(1, cfg.io_threads);
  colibri::store::ExpertStoreService service(&catalog, options, &metrics);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(cfg.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    spdlog::error("cannot listen on {}", cfg.listen);
    return 1;
  }
  std::unique_ptr<colibri::metrics::MetricsServer> metrics_server;
  if (cfg.metrics_port >= 0) {
    auto ms = colibri::metrics::MetricsServer::Start(cfg.metrics_listen_host, cfg.metrics_port, registry);
    if (!ms.ok()) {
      spdlog::error("{}", std::string(ms.status().message()));
      return 1;
    }
    metrics_server = std::move(*ms);
  }
  if (metrics_server) {
    if (auto st = colibri::WritePortFile(cfg.metrics_port_file, metrics_server->port()); !st.ok()) {
      spdlog::error("{}", std::string(st.message()));
      return 1;
    }
  }
  if (auto st = colibri::WritePortFile(cfg.port_file, port); !st.ok()) {
    spdlog::error("{}", std::string(st.message()));
    return 1;
  }
  for (const auto& [name, entry] : catalog.models()) {
    spdlog::info("serving model '{}' ({} expert blocks, {})", name, entry.container->manifest().experts.size(),
                 colibri::FormatSize(entry.container->manifest().TotalExpertBytes()));
  }
  spdlog::info("colibri-expert-store listening on port {} (metrics on {})", port,
               metrics_server ? metrics_server->port() : -1);
  int sig = colibri::WaitForShutdownSignal();
  spdlog::info("signal {}: shutting down", sig);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return 0;
}
