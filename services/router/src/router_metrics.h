// Every metric family of the router, registered in one place.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "colibri/metrics/metrics.h"

namespace colibri::router {

struct RouterMetrics {
  explicit RouterMetrics(std::shared_ptr<prometheus::Registry> registry);
  // Counts a finished HTTP/gRPC request by endpoint and status code.
  void CountRequest(const std::string& endpoint, int status);

  std::shared_ptr<prometheus::Registry> registry;
  prometheus::Family<prometheus::Counter>* requests;
  prometheus::Counter* prompt_tokens;
  prometheus::Counter* completion_tokens;
  prometheus::Histogram* time_to_first_token_seconds;
  prometheus::Histogram* request_seconds;
  prometheus::Gauge* active_requests;
  // Called before /metrics is served (e.g. to refresh compute counters in embedded mode).
  std::function<void()> before_scrape;
};

}  // namespace colibri::router
