// colibri-router: the OpenAI-compatible HTTP API and the Router gRPC API in front of a
// colibri-compute service.
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_join.h"
#include "colibri/auth/address.h"
#include "colibri/auth/flags.h"
#include "colibri/core/logging.h"
#include "colibri/core/port_file.h"
#include "colibri/core/signals.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "spdlog/spdlog.h"
#include "src/compute_client.h"
#include "src/http_api.h"
#include "src/router_core.h"
#include "src/router_service.h"

int main(int argc, char** argv) {
  colibri::BlockShutdownSignals();
  colibri::InitLogging();
  std::string model_dir, grpc_listen = "127.0.0.1:50050", port_file, grpc_port_file;
  std::vector<std::string> computes;
  colibri::router::HttpOptions http;
  size_t prefetch_hints = 64;
  CLI::App app{"colibri-router: OpenAI-compatible HTTP API and gRPC API"};
  app.add_option("--model", model_dir, "Model directory (tokenizer files and manifest)")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_option("--compute", computes,
                 "colibri-compute address host:port; several (repeated or comma-separated): each "
                 "conversation "
                 "sticks to one, failing over when it is unreachable")
      ->required()
      ->delimiter(',');
  colibri::router::AddHttpFlags(&app, &http);
  std::vector<std::string> served_names;
  colibri::router::AddServedNameFlag(&app, &served_names);
  app.add_option("--grpc-listen", grpc_listen, "Router gRPC address")->capture_default_str();
  app.add_option("--port-file", port_file, "Write the bound HTTP port to this file");
  app.add_option("--prefetch-hints", prefetch_hints,
                 "Before a request of a known conversation (session_id / user), ask compute to "
                 "warm up to N of "
                 "the experts its earlier turns used most (0: off)")
      ->capture_default_str();
  app.add_option("--grpc-port-file", grpc_port_file, "Write the bound gRPC port to this file");
  colibri::auth::KeyFlags key_flags;
  colibri::auth::AddKeyFlags(&app, &key_flags);
  colibri::auth::TlsFiles tls_files;
  colibri::auth::AddTlsFlags(&app, &tls_files);
  CLI11_PARSE(app, argc, argv);

  auto security = colibri::auth::LoadSecurity(key_flags, tls_files);
  auto grpc_credentials = security.ok()
                              ? security->ListenerCredentials(grpc_listen, "the Router gRPC API")
                              : security.status();
  if (!grpc_credentials.ok()) {
    spdlog::error("{}", std::string(grpc_credentials.status().message()));
    return 2;
  }
  http.access = security->http();
  colibri::auth::WarnIfOpen("the HTTP API", http.host, security->has_keys());
  std::vector<std::unique_ptr<colibri::router::ComputeClient>> clients;
  for (const auto& c : computes) {
    auto client = colibri::router::MakeGrpcComputeClient(c, *security->transport);
    if (!client.ok()) {
      spdlog::error("{}", std::string(client.status().message()));
      return 2;
    }
    clients.push_back(std::move(*client));
  }
  auto core = colibri::router::MakeRouterCore(model_dir, std::move(clients));
  if (!core.ok()) {
    spdlog::error("{}", std::string(core.status().message()));
    return 1;
  }
  (*core)->set_prefetch_hints(prefetch_hints);
  if (auto st = (*core)->SetServedNames(served_names); !st.ok()) {
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
  builder.AddListeningPort(grpc_listen, *grpc_credentials, &grpc_port);
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  if (!server || grpc_port == 0) {
    spdlog::error("cannot listen on {}", grpc_listen);
    return 1;
  }
  auto api = colibri::router::HttpApi::Start(core->get(), &metrics, http);
  if (!api.ok()) {
    spdlog::error("{}", std::string(api.status().message()));
    return 1;
  }
  if (auto st = colibri::WritePortFile(grpc_port_file, grpc_port); !st.ok()) return 1;
  if (auto st = colibri::WritePortFile(port_file, (*api)->port()); !st.ok()) return 1;
  spdlog::info("colibri-router: model '{}' via compute {}; HTTP on port {}, gRPC on port {}",
               (*core)->model_name(), absl::StrJoin(computes, ","), (*api)->port(), grpc_port);
  int sig = colibri::WaitForShutdownSignal();
  spdlog::info("signal {}: shutting down", sig);
  api->reset();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return 0;
}
