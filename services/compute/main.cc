// colibri-compute: runs the model. Dense weights resident; experts streamed from expert-store
// services (--store) or from the model directory, through a host-RAM cache.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/cleanup/cleanup.h"
#include "colibri/auth/address.h"
#include "colibri/auth/flags.h"
#include "colibri/core/logging.h"
#include "colibri/core/port_file.h"
#include "colibri/core/signals.h"
#include "colibri/core/units.h"
#include "fmt/ranges.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "spdlog/spdlog.h"
#include "src/cache_admin.h"
#include "src/cache_flags.h"
#include "src/compute_metrics.h"
#include "src/compute_service.h"
#include "src/store_admin.h"
#include "src/store_discovery.h"

int main(int argc, char** argv) {
  colibri::BlockShutdownSignals();
  colibri::InitLogging();
  std::string model_dir, listen = "127.0.0.1:50052", metrics_host = "127.0.0.1", port_file,
                         metrics_port_file;
  std::vector<std::string> stores;
  int metrics_port = 9102, threads = 0, max_pending = 64;
  CLI::App app{"colibri-compute: runs the model, streaming experts from expert stores"};
  app.add_option("--model", model_dir, "Model directory (manifest and dense weights)")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_option(
      "--store", stores,
      "Expert store address host:port or unix:/path (repeatable: reads spread over the holders; "
      "default: read experts from --model)");
  std::vector<std::string> store_dns;
  app.add_option(
      "--store-dns", store_dns,
      "Expert stores by DNS name host:port (repeatable): every address the name resolves to is a "
      "store, re-resolved every --store-dns-interval so new replicas join without a restart");
  double store_dns_interval = 5, store_wait = 300;
  app.add_option("--store-dns-interval", store_dns_interval,
                 "Seconds between --store-dns resolutions")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--store-wait", store_wait,
                 "Seconds to wait at start for --store-dns names to resolve and a store to answer")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));
  std::string store_shm = "auto", client_name;
  app.add_option(
         "--store-shm-size", store_shm,
         "Shared-memory region per unix: store (auto: cache size + two layers in flight; 0: off)")
      ->capture_default_str();
  app.add_option("--client-name", client_name,
                 "This node's name in the stores' metrics (default: host name)");
  app.add_option("--threads", threads, "Compute threads (0: physical cores)")
      ->capture_default_str();
  app.add_option("--listen", listen, "gRPC address (port 0 picks one)")->capture_default_str();
  app.add_option("--metrics-port", metrics_port,
                 "Prometheus /metrics port (0 picks one, -1 disables)")
      ->capture_default_str();
  app.add_option("--metrics-host", metrics_host,
                 "Bind address of the metrics port (/metrics, /health, /admin/...; 0.0.0.0: every "
                 "interface)")
      ->capture_default_str();
  app.add_option("--max-pending-requests", max_pending, "Requests allowed to wait for the engine")
      ->capture_default_str();
  app.add_option("--port-file", port_file, "Write the bound gRPC port to this file");
  app.add_option("--metrics-port-file", metrics_port_file,
                 "Write the bound metrics port to this file");
  colibri::compute::CacheFlags cache_flags;
  colibri::compute::AddCacheFlags(&app, &cache_flags);
  colibri::auth::KeyFlags key_flags;
  colibri::auth::AddKeyFlags(&app, &key_flags);
  colibri::auth::TlsFiles tls_files;
  colibri::auth::AddTlsFlags(&app, &tls_files);
  CLI11_PARSE(app, argc, argv);

  auto security = colibri::auth::LoadSecurity(key_flags, tls_files);
  auto credentials =
      security.ok() ? security->ListenerCredentials(listen, nullptr) : security.status();
  if (!credentials.ok()) {
    spdlog::error("{}", std::string(credentials.status().message()));
    return 2;
  }

  std::vector<colibri::compute::DnsName> dns_names;
  for (const auto& n : store_dns) {
    auto parsed = colibri::compute::ParseDnsName(n);
    if (!parsed.ok()) {
      spdlog::error("{}", std::string(parsed.status().message()));
      return 2;
    }
    dns_names.push_back(*parsed);
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
  options.transport = security->transport;
  options.threads = threads;
  if (auto st = colibri::compute::ApplyCacheFlags(cache_flags, &options); !st.ok()) {
    spdlog::error("{}", std::string(st.message()));
    return 2;
  }
  // With --store-dns the stores may still be starting (or importing the model): wait for the
  // names to resolve and for a store to answer, up to --store-wait. New replicas join later.
  std::unique_ptr<colibri::compute::StoreDiscovery> discovery;
  std::function<void(const std::string&)> add_store = [](const std::string&) {};
  if (!dns_names.empty()) {
    discovery = std::make_unique<colibri::compute::StoreDiscovery>(
        dns_names, colibri::compute::ResolveHost,
        [&add_store](const std::string& t) { add_store(t); });
  }
  const auto wait_until =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(store_wait);
  absl::StatusOr<std::unique_ptr<colibri::compute::ComputeNode>> node =
      absl::UnavailableError("not started");
  while (true) {
    if (discovery) {
      discovery->Poll();
      options.stores = stores;
      for (const auto& t : discovery->Current()) options.stores.push_back(t);
    }
    if (!options.stores.empty() || dns_names.empty())
      node = colibri::compute::ComputeNode::Create(options);
    const bool retry = discovery && (options.stores.empty() ||
                                     node.status().code() == absl::StatusCode::kUnavailable);
    if (!retry || std::chrono::steady_clock::now() >= wait_until) break;
    spdlog::info("waiting for expert stores ({}): {}", fmt::join(store_dns, ", "),
                 options.stores.empty() ? std::string("no address yet")
                                        : std::string(node.status().message()));
    // Sleep 2 s, ending early on SIGINT/SIGTERM (blocked in every thread, so wait for them here).
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    const timespec pause{2, 0};
    if (int sig = sigtimedwait(&set, nullptr, &pause); sig > 0) {
      spdlog::info("signal {} while waiting for expert stores: exiting", sig);
      return 0;
    }
  }
  if (discovery && options.stores.empty()) {
    spdlog::error("--store-dns {}: no address after {} s", fmt::join(store_dns, ", "), store_wait);
    return 1;
  }
  if (!node.ok()) {
    spdlog::error("{}", std::string(node.status().message()));
    return 1;
  }
  // Stop polling before the node goes (discovery was made first, so it would be destroyed last).
  absl::Cleanup stop_discovery = [&discovery] { discovery.reset(); };
  if (discovery) {
    // Stores that resolved at start are in the node already; later answers are added to it.
    discovery->MarkKnown(options.stores);
    add_store = [n = node->get()](const std::string& t) {
      if (auto st = n->AddStore(t); !st.ok())
        spdlog::error("adding store {}: {}", t, std::string(st.message()));
    };
    discovery->Start(std::chrono::milliseconds(static_cast<int64_t>(store_dns_interval * 1000)));
  }
  auto registry = std::make_shared<prometheus::Registry>();
  colibri::compute::ComputeMetrics metrics(registry);
  colibri::compute::ComputeService service(node->get(), &metrics, std::max(1, max_pending));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, *credentials, &port);
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  if (!server || port == 0) {
    spdlog::error("cannot listen on {}", listen);
    return 1;
  }
  std::unique_ptr<colibri::metrics::MetricsServer> metrics_server;
  if (metrics_port >= 0) {
    std::vector<colibri::metrics::HttpRoute> admin_routes;
    if (colibri::auth::AdminRoutesAllowed("the metrics port", metrics_host, security->has_keys())) {
      admin_routes = colibri::compute::AdminRoutes(node->get());
      for (auto& r : colibri::compute::StoreAdminRoutes(node->get()))
        admin_routes.push_back(std::move(r));
    }
    auto ms = colibri::metrics::MetricsServer::Start(
        metrics_host, metrics_port, registry, [&] { metrics.Refresh(**node); }, admin_routes,
        security->http());
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
  if (!options.stores.empty()) {
    origin.clear();
    for (const auto& s : options.stores) origin += (origin.empty() ? "" : ", ") + s;
  }
  spdlog::info("colibri-compute serving model '{}' on port {} (experts from {}, cache {})",
               (*node)->model_name(), port, origin,
               colibri::FormatSize((*node)->options().expert_cache_bytes));
  int sig = colibri::WaitForShutdownSignal();
  spdlog::info("signal {}: shutting down", sig);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return 0;
}
