// colibri-compute: runs the model. Dense weights resident; experts streamed from expert-store
// services (--store) or from the model directory, through a host-RAM cache.
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "colibri/core/logging.h"
#include "colibri/core/port_file.h"
#include "colibri/core/signals.h"
#include "colibri/core/units.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "spdlog/spdlog.h"
#include "src/cache_admin.h"
#include "src/store_admin.h"
#include "src/cache_flags.h"
#include "src/compute_metrics.h"
#include "src/compute_service.h"

int main(int argc, char** argv) {
  colibri::BlockShutdownSignals();
  colibri::InitLogging();
  std::string model_dir, listen = "0.0.0.0:50052", cache_size = "2G", port_file, metrics_port_file;
  std::vector<std::string> stores;
  int metrics_port = 9102, threads = 0, max_pending = 64;
  CLI::App app{"colibri-compute: runs the model, streaming experts from expert stores"};
  app.add_option("--model", model_dir, "Model directory (manifest and dense weights)")->required()->check(CLI::ExistingDirectory);
  app.add_option("--store", stores,
                 "Expert store address host:port or unix:/path (repeatable: reads spread over the holders; "
                 "default: read experts from --model)");
  std::string store_shm = "auto", client_name;
  app.add_option("--store-shm-size", store_shm,
                 "Shared-memory region per unix: store (auto: cache size + two layers in flight; 0: off)")
      ->capture_default_str();
  app.add_option("--client-name", client_name, "This node's name in the stores' metrics (default: host name)");
  app.add_option("--expert-cache-size", cache_size, "Host-RAM expert cache budget")->capture_default_str();
  app.add_option("--threads", threads, "Compute threads (0: physical cores)")->capture_default_str();
  app.add_option("--listen", listen, "gRPC address (port 0 picks one)")->capture_default_str();
  app.add_option("--metrics-port", metrics_port, "Prometheus /metrics port (0 picks one, -1 disables)")->capture_default_str();
  app.add_option("--max-pending-requests", max_pending, "Requests allowed to wait for the engine")->capture_default_str();
  app.add_option("--port-file", port_file, "Write the bound gRPC port to this file");
  app.add_option("--metrics-port-file", metrics_port_file, "Write the bound metrics port to this file");
  colibri::compute::CacheFlags cache_flags;
  colibri::compute::AddCacheFlags(&app, &cache_flags);
  CLI11_PARSE(app, argc, argv);

  auto cache_bytes = colibri::ParseSize(cache_size);
  if (!cache_bytes.ok()) {
    spdlog::error("--expert-cache-size: {}", std::string(cache_bytes.status().message()));
    return 2;
  }
  colibri::compute::ComputeNodeOptions options;
  options.model_dir = model_dir;
  options.stores = stores;
  if (store_shm != "auto") {
    auto shm = colibri::ParseSize(store_shm);
    if (!shm.ok()) {
      spdlog::error("--store-shm-size: {}", std::string(shm.status().message()));
      return 2;
    }
    options.store_shm_bytes = *shm;
  }
  if (client_name.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) == 0) client_name = host;
  }
  options.client_name = client_name;
  options.expert_cache_bytes = *cache_bytes;
  options.threads = threads;
  if (auto st = colibri::compute::ApplyCacheFlags(cache_flags, &options); !st.ok()) {
    spdlog::error("{}", std::string(st.message()));
    return 2;
  }
  auto node = colibri::compute::ComputeNode::Create(options);
  if (!node.ok()) {
    spdlog::error("{}", std::string(node.status().message()));
    return 1;
  }
  auto registry = std::make_shared<prometheus::Registry>();
  colibri::compute::ComputeMetrics metrics(registry);
  colibri::compute::ComputeService service(node->get(), &metrics, std::max(1, max_pending));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  if (!server || port == 0) {
    spdlog::error("cannot listen on {}", listen);
    return 1;
  }
  std::unique_ptr<colibri::metrics::MetricsServer> metrics_server;
  if (metrics_port >= 0) {
    auto admin_routes = colibri::compute::AdminRoutes(node->get());
    for (auto& r : colibri::compute::StoreAdminRoutes(node->get())) admin_routes.push_back(std::move(r));
    auto ms = colibri::metrics::MetricsServer::Start("0.0.0.0", metrics_port, registry,
                                                     [&] { metrics.Refresh(**node); },
                                                     admin_routes);
    if (!ms.ok()) {
      spdlog::error("{}", std::string(ms.status().message()));
      return 1;
    }
    metrics_server = std::move(*ms);
  }
  if (metrics_server) {
    if (auto st = colibri::WritePortFile(metrics_port_file, metrics_server->port()); !st.ok()) {
      spdlog::error("{}", std::string(st.message()));
      return 1;
    }
  }
  if (auto st = colibri::WritePortFile(port_file, port); !st.ok()) {
    spdlog::error("{}", std::string(st.message()));
    return 1;
  }
  std::string origin = model_dir;
  if (!stores.empty()) {
    origin.clear();
    for (const auto& s : stores) origin += (origin.empty() ? "" : ", ") + s;
  }
  spdlog::info("colibri-compute serving model '{}' on port {} (experts from {}, cache {})", (*node)->model_name(),
               port, origin, colibri::FormatSize(*cache_bytes));
  int sig = colibri::WaitForShutdownSignal();
  spdlog::info("signal {}: shutting down", sig);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return 0;
}
