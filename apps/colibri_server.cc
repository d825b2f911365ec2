// colibri-server: router, compute and expert store in one process, wired through the
// in-process implementations of the same interfaces the cluster uses over gRPC. The default a
// new user starts first.
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "cache_admin.h"
#include "cache_flags.h"
#include "colibri/auth/address.h"
#include "colibri/auth/flags.h"
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
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  colibri::BlockShutdownSignals();
  colibri::InitLogging();
  std::string model_dir, grpc_listen = "", port_file, grpc_port_file;
  int threads = 0;
  colibri::router::HttpOptions http;
  size_t prefetch_hints = 64;
  CLI::App app{"colibri-server: the whole of colibri in one process (OpenAI API on --port)"};
  app.add_option("--model", model_dir, "Model directory made by colibri-convert")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_option("--threads", threads, "Compute threads (0: physical cores)")
      ->capture_default_str();
  colibri::router::AddHttpFlags(&app, &http);
  std::vector<std::string> served_names;
  colibri::router::AddServedNameFlag(&app, &served_names);
  app.add_option("--grpc-listen", grpc_listen, "Also serve the Router gRPC API here (host:port)");
  app.add_option("--port-file", port_file, "Write the bound HTTP port to this file");
  app.add_option("--grpc-port-file", grpc_port_file,
                 "Write the bound gRPC port to this file (--grpc-listen)");
  app.add_option("--prefetch-hints", prefetch_hints,
                 "Before a request of a known conversation (session_id / user), ask compute to "
                 "warm up to N of "
                 "the experts its earlier turns used most (0: off)")
      ->capture_default_str();
  colibri::compute::CacheFlags cache_flags;
  colibri::compute::AddCacheFlags(&app, &cache_flags);
  colibri::auth::KeyFlags key_flags;
  colibri::auth::AddKeyFlags(&app, &key_flags);
  colibri::auth::TlsFiles tls_files;
  colibri::auth::AddTlsFlags(&app, &tls_files);
  CLI11_PARSE(app, argc, argv);

  auto security = colibri::auth::LoadSecurity(key_flags, tls_files);
  auto grpc_credentials = !security.ok() ? security.status()
                          : grpc_listen.empty()
                              ? absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>(nullptr)
                              : security->ListenerCredentials(grpc_listen, "the Router gRPC API");
  if (!grpc_credentials.ok()) {
    spdlog::error("{}", std::string(grpc_credentials.status().message()));
    return 2;
  }
  http.access = security->http();
  colibri::auth::WarnIfOpen("the HTTP API", http.host, security->has_keys());

  colibri::compute::ComputeNodeOptions options;
  options.model_dir = model_dir;
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
  auto core = colibri::router::MakeRouterCore(
      model_dir, colibri::router::MakeInProcessComputeClient(node->get()));
  if (!core.ok()) {
    spdlog::error("{}", std::string(core.status().message()));
    return 1;
  }
  (*core)->set_prefetch_hints(prefetch_hints);
  if (auto st = (*core)->SetServedNames(served_names); !st.ok()) {
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
  if (auto st = colibri::WritePortFile(port_file, (*api)->port()); !st.ok()) return 1;
  if (server) {
    if (auto st = colibri::WritePortFile(grpc_port_file, grpc_port); !st.ok()) return 1;
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
