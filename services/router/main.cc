// colibri-router: the OpenAI-compatible HTTP API and the Router gRPC API in front of a
// colibri-compute service.
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_join.h"
#include "colibri/auth/address.h"
#include "colibri/core/logging.h"
#include "colibri/core/port_file.h"
#include "colibri/core/signals.h"
#include "compute_client.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "http_api.h"
#include "router_config.h"
#include "router_core.h"
#include "router_service.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  colibri::BlockShutdownSignals();
  colibri::InitLogging();
  colibri::router::RouterConfig cfg;
  CLI::App app{"colibri-router: OpenAI-compatible HTTP API and gRPC API"};
  colibri::router::AddRouterFlags(&app, &cfg);
  CLI11_PARSE(app, argc, argv);

  auto security = colibri::auth::LoadSecurity(cfg.security);
  auto grpc_credentials =
      security.ok() ? security->ListenerCredentials(cfg.grpc_listen, "the Router gRPC API")
                    : security.status();
  if (!grpc_credentials.ok()) {
    spdlog::error("{}", std::string(grpc_credentials.status().message()));
    return 2;
  }
  colibri::router::HttpOptions http = cfg.front.http;
  http.access = security->http();
  colibri::auth::WarnIfOpen("the HTTP API", http.host, security->has_keys());
  std::vector<std::unique_ptr<colibri::router::ComputeClient>> clients;
  for (const auto& c : cfg.computes) {
    auto client = colibri::router::MakeGrpcComputeClient(c, *security->transport);
    if (!client.ok()) {
      spdlog::error("{}", std::string(client.status().message()));
      return 2;
    }
    clients.push_back(std::move(*client));
  }
  auto core = colibri::router::MakeRouterCore(cfg.model_dir, std::move(clients));
  if (!core.ok()) {
    spdlog::error("{}", std::string(core.status().message()));
    return 1;
  }
  if (auto st = colibri::router::ApplyFrontFlags(cfg.front, core->get()); !st.ok()) {
    spdlog::error("{}", std::string(st.message()));
    return 2;
  }
  auto registry = std::make_shared<prometheus::Registry>();
  colibri::router::RouterMetrics metrics(registry);
  colibri::router::RouterService service(core->get(), &metrics, http.threads);
  service.set_api_keys(security->keys);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int grpc_port = 0;
  builder.AddListeningPort(cfg.grpc_listen, *grpc_credentials, &grpc_port);
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  if (!server || grpc_port == 0) {
    spdlog::error("cannot listen on {}", cfg.grpc_listen);
    return 1;
  }
  auto api = colibri::router::HttpApi::Start(core->get(), &metrics, http);
  if (!api.ok()) {
    spdlog::error("{}", std::string(api.status().message()));
    return 1;
  }
  if (auto st = colibri::WritePortFile(cfg.front.grpc_port_file, grpc_port); !st.ok()) return 1;
  if (auto st = colibri::WritePortFile(cfg.front.port_file, (*api)->port()); !st.ok()) return 1;
  spdlog::info("colibri-router: model '{}' via compute {}; HTTP on port {}, gRPC on port {}",
               (*core)->model_name(), absl::StrJoin(cfg.computes, ","), (*api)->port(), grpc_port);
  int sig = colibri::WaitForShutdownSignal();
  spdlog::info("signal {}: shutting down", sig);
  api->reset();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return 0;
}
