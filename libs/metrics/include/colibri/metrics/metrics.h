// Prometheus helpers: text exposition of a registry, and a small HTTP endpoint serving
// /metrics (and /health) for services that have no HTTP API of their own.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/auth/http_auth.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace httplib {
class Server;
}

namespace colibri::metrics {

// Text exposition format (version 0.0.4) of every family in the registries.
std::string Serialize(const prometheus::Registry& registry);

// A small JSON endpoint served beside /metrics (admin calls such as GET /admin/stats).
struct HttpRoute {
  std::string method;  // "GET" | "POST"
  std::string path;
  // Takes the request body; returns the HTTP status and a JSON body.
  std::function<std::pair<int, std::string>(const std::string& body)> handler;
};

// Registers `routes` on `server` (JSON bodies) and GET /health ({"status":"ok"}) unless `routes`
// has its own; shared by MetricsServer and the HTTP API.
void AddJsonRoutes(httplib::Server& server, const std::vector<HttpRoute>& routes);

// Serves GET /metrics (calling `before_scrape` first, to refresh gauges), GET /health
// ({"status":"ok"} unless `routes` has its own GET /health) and `routes` on host:port in a background thread. Port 0 picks a free port (see port()). With
// keys in `access`, every path but /health (and /metrics when metrics_public) answers 401
// without "Authorization: Bearer KEY".
class MetricsServer {
 public:
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& host, int port, std::shared_ptr<prometheus::Registry> registry,
      std::function<void()> before_scrape = {}, std::vector<HttpRoute> routes = {},
      auth::HttpPolicy access = {});
  ~MetricsServer();
  int port() const { return port_; }

 private:
  MetricsServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

// Default latency buckets in seconds (100 µs .. 30 s).
prometheus::Histogram::BucketBoundaries LatencyBuckets();

}  // namespace colibri::metrics
