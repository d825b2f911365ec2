#include "router_metrics.h"

namespace colibri::router {

RouterMetrics::RouterMetrics(std::shared_ptr<prometheus::Registry> r) : registry(std::move(r)) {
  requests = &prometheus::BuildCounter()
                  .Name("colibri_router_requests_total")
                  .Help("Finished API requests, by endpoint and status code")
                  .Register(*registry);
  prompt_tokens = &prometheus::BuildCounter()
                       .Name("colibri_router_prompt_tokens_total")
                       .Help("Prompt tokens of finished requests")
                       .Register(*registry)
                       .Add({});
  completion_tokens = &prometheus::BuildCounter()
                           .Name("colibri_router_completion_tokens_total")
                           .Help("Generated tokens of finished requests")
                           .Register(*registry)
                           .Add({});
  time_to_first_token_seconds = &prometheus::BuildHistogram()
                                     .Name("colibri_router_time_to_first_token_seconds")
                                     .Help("From request arrival to the first streamed token")
                                     .Register(*registry)
                                     .Add({}, metrics::LatencyBuckets());
  request_seconds = &prometheus::BuildHistogram()
                         .Name("colibri_router_request_seconds")
                         .Help("Whole request duration")
                         .Register(*registry)
                         .Add({}, metrics::LatencyBuckets());
  active_requests = &prometheus::BuildGauge()
                         .Name("colibri_router_active_requests")
                         .Help("Requests in progress")
                         .Register(*registry)
                         .Add({});
}

void RouterMetrics::CountRequest(const std::string& endpoint, int status) {
  requests->Add({{"endpoint", endpoint}, {"code", std::to_string(status)}}).Increment();
}

}  // namespace colibri::router
