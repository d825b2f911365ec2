// colibri-compute: runs the model. Dense weights resident; experts streamed from expert-store
// services (--store, --store-dns) or from the model directory, through a host-RAM cache.
// main reads as its steps: parse the flags, build the node (waiting for stores found by DNS),
// serve it over gRPC and the metrics port, shut down on SIGINT/SIGTERM.
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cache_admin.h"
#include "colibri/auth/address.h"
#include "colibri/core/logging.h"
#include "colibri/core/port_file.h"
#include "colibri/core/signals.h"
#include "colibri/core/status.h"
#include "colibri/core/units.h"
#include "compute_config.h"
#include "compute_metrics.h"
#include "compute_service.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "spdlog/spdlog.h"
#include "store_admin.h"
#include "store_discovery.h"

namespace {

namespace compute = colibri::compute;

// The node and, with --store-dns, the discovery that adds stores found later to it (declared
// after the node: it stops polling before the node goes).
struct RunningNode {
  std::unique_ptr<compute::ComputeNode> node;
  std::unique_ptr<compute::StoreDiscovery> discovery;
};

// Builds the node. With --store-dns the stores may still be starting (or importing the model):
// waits for the names to resolve and for a store to answer, up to --store-wait, then keeps
// resolving every --store-dns-interval so new replicas join. Cancelled when SIGINT/SIGTERM ends
// the wait.
absl::StatusOr<std::unique_ptr<RunningNode>> BuildNode(const compute::ComputeConfig& cfg,
                                                       compute::ComputeNodeOptions options,
                                                       std::vector<compute::DnsName> dns) {
  auto running = std::make_unique<RunningNode>();
  if (dns.empty()) {
    ASSIGN_OR_RETURN(running->node, compute::ComputeNode::Create(options));
    return running;
  }
  RunningNode* r = running.get();
  running->discovery = std::make_unique<compute::StoreDiscovery>(
      std::move(dns), compute::ResolveHost, [r](const std::string& target) {
        if (!r->node) return;  // while waiting, Current() has it
        if (auto st = r->node->AddStore(target); !st.ok())
          spdlog::error("adding store {}: {}", target, std::string(st.message()));
      });
  const std::vector<std::string> given = options.stores;
  const auto wait_until =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(cfg.store_wait_s);
  absl::StatusOr<std::unique_ptr<compute::ComputeNode>> node =
      absl::UnavailableError("not started");
  while (true) {
    running->discovery->Poll();
    options.stores = given;
    for (const auto& t : running->discovery->Current()) options.stores.push_back(t);
    if (!options.stores.empty()) node = compute::ComputeNode::Create(options);
    const bool retry =
        options.stores.empty() || node.status().code() == absl::StatusCode::kUnavailable;
    if (!retry || std::chrono::steady_clock::now() >= wait_until) break;
    spdlog::info("waiting for expert stores ({}): {}", absl::StrJoin(cfg.store_dns, ", "),
                 options.stores.empty() ? std::string("no address yet")
                                        : std::string(node.status().message()));
    if (int sig = colibri::WaitForShutdownSignalFor(std::chrono::seconds(2)); sig > 0) {
      return absl::CancelledError(
          absl::StrCat("signal ", sig, " while waiting for expert stores: exiting"));
    }
  }
  if (options.stores.empty()) {
    return absl::UnavailableError(absl::StrCat("--store-dns ", absl::StrJoin(cfg.store_dns, ", "),
                                               ": no address after ", cfg.store_wait_s, " s"));
  }
  if (!node.ok()) return node.status();
  running->node = std::move(*node);
  // Stores that resolved by now are in the node already; later answers are added to it.
  running->discovery->MarkKnown(options.stores);
  running->discovery->Start(
      std::chrono::milliseconds(static_cast<int64_t>(cfg.store_dns_interval_s * 1000)));
  return running;
}

// The node's listeners: ComputeService over gRPC and the metrics port (with the admin routes
// where AdminRoutesAllowed). Members in the order they must be built; destroyed in reverse.
struct Serving {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<compute::ComputeMetrics> metrics;
  std::unique_ptr<compute::ComputeService> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::unique_ptr<colibri::metrics::MetricsServer> metrics_server;
};

absl::StatusOr<std::unique_ptr<Serving>> Serve(
    const compute::ComputeConfig& cfg, const colibri::auth::Security& security,
    const std::shared_ptr<grpc::ServerCredentials>& credentials, compute::ComputeNode* node) {
  auto s = std::make_unique<Serving>();
  s->metrics = std::make_unique<compute::ComputeMetrics>(s->registry);
  s->service = std::make_unique<compute::ComputeService>(node, s->metrics.get(),
                                                         std::max(1, cfg.max_pending_requests));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(cfg.listen, credentials, &s->port);
  builder.RegisterService(s->service.get());
  s->server = builder.BuildAndStart();
  if (!s->server || s->port == 0)
    return absl::UnavailableError(absl::StrCat("cannot listen on ", cfg.listen));
  std::vector<colibri::metrics::HttpRoute> admin_routes;
  if (colibri::auth::AdminRoutesAllowed("the metrics port", cfg.metrics.host,
                                        security.has_keys())) {
    admin_routes = compute::AdminRoutes(node);
    for (auto& r : compute::StoreAdminRoutes(node)) admin_routes.push_back(std::move(r));
  }
  ASSIGN_OR_RETURN(s->metrics_server, colibri::metrics::StartMetricsListener(
                                          cfg.metrics, s->registry,
                                          [m = s->metrics.get(), node] { m->Refresh(*node); },
                                          std::move(admin_routes), security.http()));
  RETURN_IF_ERROR(colibri::WritePortFile(cfg.port_file, s->port));
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  colibri::BlockShutdownSignals();
  colibri::InitLogging();

  // 1. Parse: the flags, the security they name, the node's options.
  compute::ComputeConfig cfg;
  CLI::App app{"colibri-compute: runs the model, streaming experts from expert stores"};
  compute::AddComputeFlags(&app, &cfg);
  CLI11_PARSE(app, argc, argv);
  auto security = colibri::auth::LoadSecurity(cfg.security);
  auto credentials =
      security.ok() ? security->ListenerCredentials(cfg.listen, nullptr) : security.status();
  auto options = compute::ResolveComputeNode(cfg);
  auto dns = compute::ResolveStoreDns(cfg);
  for (const absl::Status& st : {credentials.status(), options.status(), dns.status()}) {
    if (!st.ok()) {
      spdlog::error("{}", std::string(st.message()));
      return 2;
    }
  }
  options->transport = security->transport;

  // 2. Build the node.
  auto running = BuildNode(cfg, *std::move(options), *std::move(dns));
  if (!running.ok()) {
    if (absl::IsCancelled(running.status())) {
      spdlog::info("{}", std::string(running.status().message()));
      return 0;
    }
    spdlog::error("{}", std::string(running.status().message()));
    return 1;
  }
  compute::ComputeNode& node = *(*running)->node;

  // 3. Serve.
  auto serving = Serve(cfg, *security, *credentials, &node);
  if (!serving.ok()) {
    spdlog::error("{}", std::string(serving.status().message()));
    return 1;
  }
  const auto& stores = node.options().stores;
  spdlog::info("colibri-compute serving model '{}' on port {} (experts from {}, cache {})",
               node.model_name(), (*serving)->port,
               stores.empty() ? node.options().model_dir : absl::StrJoin(stores, ", "),
               colibri::FormatSize(node.options().expert_cache_bytes));

  // 4. Shut down: gRPC first (in-flight calls get 5 s), then the metrics port, the discovery
  // and the node, in that order as they go out of scope.
  int sig = colibri::WaitForShutdownSignal();
  spdlog::info("signal {}: shutting down", sig);
  (*serving)->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return 0;
}
