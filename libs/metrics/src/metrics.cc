#include "colibri/metrics/metrics.h"

#include <httplib.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "prometheus/text_serializer.h"

namespace colibri::metrics {

std::string Serialize(const prometheus::Registry& registry) {
  prometheus::TextSerializer serializer;
  return serializer.Serialize(registry.Collect());
}

void AddJsonRoutes(httplib::Server& server, const std::vector<HttpRoute>& routes) {
  const bool own_health = std::any_of(routes.begin(), routes.end(), [](const HttpRoute& r) {
    return r.method == "GET" && r.path == "/health";
  });
  if (!own_health) {
    server.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("{\"status\":\"ok\"}", "application/json");
    });
  }
  for (const auto& route : routes) {
    auto handler = [h = route.handler](const httplib::Request& req, httplib::Response& res) {
      auto [status, body] = h(req.body);
      res.status = status;
      res.set_content(body, "application/json");
    };
    if (route.method == "POST") {
      server.Post(route.path, handler);
    } else {
      server.Get(route.path, handler);
    }
  }
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& host, int port, std::shared_ptr<prometheus::Registry> registry,
    std::function<void()> before_scrape, std::vector<HttpRoute> routes, auth::HttpPolicy access) {
  auto s = std::unique_ptr<MetricsServer>(new MetricsServer());
  s->server_ = std::make_unique<httplib::Server>();
  s->server_->set_pre_routing_handler(
      [access](const httplib::Request& req, httplib::Response& res) {
        auto who = auth::AuthorizeHttp(access, req.path, req.get_header_value("Authorization"));
        if (who.ok()) return httplib::Server::HandlerResponse::Unhandled;
        res.status = 401;
        res.set_header("WWW-Authenticate", "Bearer");
        res.set_content(
            nlohmann::json{{"error", {{"message", std::string(who.status().message())}}}}.dump(),
            "application/json");
        return httplib::Server::HandlerResponse::Handled;
      });
  s->server_->Get("/metrics",
                  [registry, before_scrape](const httplib::Request&, httplib::Response& res) {
                    if (before_scrape) before_scrape();
                    res.set_content(Serialize(*registry), "text/plain; version=0.0.4");
                  });
  AddJsonRoutes(*s->server_, routes);
  if (port == 0) {
    s->port_ = s->server_->bind_to_any_port(host);
    if (s->port_ <= 0) return absl::UnavailableError(absl::StrCat("metrics: cannot bind ", host));
  } else {
    if (!s->server_->bind_to_port(host, port)) {
      return absl::UnavailableError(
          absl::StrCat("metrics: cannot bind ", host, ":", port, " (in use?)"));
    }
    s->port_ = port;
  }
  s->thread_ = std::thread([srv = s->server_.get()] { srv->listen_after_bind(); });
  return s;
}

MetricsServer::~MetricsServer() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
          0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30};
}

}  // namespace colibri::metrics
