#include "colibri/metrics/listen_flags.h"

#include <utility>

#include "colibri/core/port_file.h"

namespace colibri::metrics {

void AddMetricsListenFlags(CLI::App* app, MetricsListenFlags* flags) {
  app->add_option("--metrics-port", flags->port,
                  "Prometheus /metrics port (0 picks one, -1 disables)")
      ->capture_default_str();
  app->add_option("--metrics-host", flags->host,
                  "Bind address of the metrics port (/metrics, /health and the service's "
                  "/admin/... routes; 0.0.0.0: every interface)")
      ->capture_default_str();
  app->add_option("--metrics-port-file", flags->port_file,
                  "Write the bound metrics port to this file");
}

absl::StatusOr<std::unique_ptr<MetricsServer>> StartMetricsListener(
    const MetricsListenFlags& flags, std::shared_ptr<prometheus::Registry> registry,
    std::function<void()> before_scrape, std::vector<HttpRoute> routes, auth::HttpPolicy access) {
  if (flags.port < 0) return std::unique_ptr<MetricsServer>();
  auto server =
      MetricsServer::Start(flags.host, flags.port, std::move(registry), std::move(before_scrape),
                           std::move(routes), std::move(access));
  if (!server.ok()) return server.status();
  if (auto st = WritePortFile(flags.port_file, (*server)->port()); !st.ok()) return st;
  return server;
}

}  // namespace colibri::metrics
