// colibri-server: router, compute and expert store in one process, wired through the
// in-process implementations of the same interfaces the cluster uses over gRPC. The default a
// new user starts first.
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "cache_admin.h"
#include "colibri/auth/address.h"
#include "colibri/core/logging.h"
#include "colibri/core/port_file.h"
#include "colibri/core/signals.h"
#include "colibri/core/units.h"
#include "compute_metrics.h"
#include "compute_node.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "http_api.h"
#include "in_process_compute.h"
#include "router_core.h"
#include "router_service.h"
#include "server_config.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  colibri::BlockShutdownSignals();
  colibri::InitLogging();
  colibri::server::ServerConfig cfg;
  CLI::App app{"colibri-server: the whole of colibri in one process (OpenAI API on --port)"};
  colibri::server::AddServerFlags(&app, &cfg);
  CLI11_PARSE(app, argc, argv);

  auto security = colibri::auth::LoadSecurity(cfg.security);
  const std::string& grpc_listen = cfg.grpc_listen;
  auto grpc_credentials = !security.ok() ? security.status()
                          : grpc_listen.empty()
                              ? absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>(nullptr)
                              : security->ListenerCredentials(grpc_listen, "the Router gRPC API");
  if (!grpc_credentials.ok()) {
    spdlog::error("{}", std::string(grpc_credentials.status().message()));
    return 2;
  }
  colibri::router::HttpOptions http = cfg.front.http;
  http.access = security->http();
  colibri::auth::WarnIfOpen("the HTTP API", http.host, security->has_keys());

  auto options = colibri::compute::ResolveNodeFlags(cfg.node);
  if (!options.ok()) {
    spdlog::error("{}", std::string(options.status().message()));
    return 2;
  }
  auto node = colibri::compute::ComputeNode::Create(*options);
  if (!node.ok()) {
    spdlog::error("{}", std::string(node.status().message()));
    return 1;
  }
  auto core = colibri::router::MakeRouterCore(
      options->model_dir, colibri::router::MakeInProcessComputeClient(node->get()));
  if (!core.ok()) {
    spdlog::error("{}", std::string(core.status().message()));
    return 1;
  }
  if (auto st = colibri::router::ApplyFrontFlags(cfg.front, core->get()); !st.ok()) {
    spdlog::error("{}", std::string(st.message()));
    return 2;
  }
  // One registry: the router's HTTP /metrics shows router and compute families together.
  auto registry = std::make_shared<prometheus::Registry>();
  colibri::router::RouterMetrics router_metrics(registry);
  colibri::compute::ComputeMetrics compute_metrics(registry);
  std::unique_ptr<colibri::router::RouterService> service;
  std::unique_ptr<grpc::Server> server;
  int grpc_port = 0;
  if (!grpc_listen.empty()) {
    service = std::make_unique<colibri::router::RouterService>(core->get(), &router_metrics,
                                                               http.threads);
    service->set_api_keys(security->keys);
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort(grpc_listen, *grpc_credentials, &grpc_port);
    builder.RegisterService(service.get());
    server = builder.BuildAndStart();
    if (!server || grpc_port == 0) {
      spdlog::error("cannot listen on {}", grpc_listen);
      return 1;
    }
  }
  // Scrapes refresh the compute counters first.
  router_metrics.before_scrape = [&] { compute_metrics.Refresh(**node); };
  if (colibri::auth::AdminRoutesAllowed("the HTTP API", http.host, security->has_keys())) {
    http.extra_routes =
        colibri::compute::AdminRoutes(node->get());  // /admin/stats, /admin/cache/clear
  }
  http.node_stats = [n = node->get()] { return colibri::compute::TierSummaryJson(*n).dump(); };
  auto api = colibri::router::HttpApi::Start(core->get(), &router_metrics, http);
  if (!api.ok()) {
    spdlog::error("{}", std::string(api.status().message()));
    return 1;
  }
  if (auto st = colibri::WritePortFile(cfg.front.port_file, (*api)->port()); !st.ok()) return 1;
  if (server) {
    if (auto st = colibri::WritePortFile(cfg.front.grpc_port_file, grpc_port); !st.ok()) return 1;
  }
  const auto& m = (*node)->manifest();
  spdlog::info(
      "colibri-server: model '{}' ({} layers, {} experts, top-{}), expert cache {}, dense {}",
      m.name, m.config.n_layers, m.config.n_experts, m.config.top_k,
      colibri::FormatSize((*node)->options().expert_cache_bytes),
      colibri::FormatSize(m.dense_size));
  spdlog::info("OpenAI API on http://{}:{}/v1", http.host, (*api)->port());
  int sig = colibri::WaitForShutdownSignal();
  spdlog::info("signal {}: shutting down", sig);
  api->reset();
  if (server) server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return 0;
}
