#include "store_admin.h"

#include "nlohmann/json.hpp"

namespace colibri::compute {

namespace {
std::pair<int, std::string> Error(int status, const std::string& message) {
  return {status, nlohmann::json{{"error", {{"message", message}}}}.dump()};
}
}  // namespace

std::vector<metrics::HttpRoute> StoreAdminRoutes(ComputeNode* node) {
  std::vector<metrics::HttpRoute> routes;
  routes.push_back(
      {"GET", "/admin/stores", [node](const std::string&) -> std::pair<int, std::string> {
         nlohmann::ordered_json stores = nlohmann::ordered_json::array();
         for (const auto& s : node->store_states()) {
           stores.push_back({{"target", s.target},
                             {"up", s.up},
                             {"full_copy", s.full_copy},
                             {"received_bytes", s.stats.bytes},
                             {"shm_blocks", s.stats.shm_blocks},
                             {"outstanding_bytes", s.stats.outstanding_bytes},
                             {"reconnects", s.stats.reconnects}});
         }
         return {200,
                 nlohmann::ordered_json{{"stores", stores}, {"failovers", node->store_failovers()}}
                     .dump()};
       }});
  routes.push_back(
      {"POST", "/admin/stores", [node](const std::string& body) -> std::pair<int, std::string> {
         nlohmann::json req = nlohmann::json::parse(body.empty() ? "{}" : body, nullptr, false);
         if (req.is_discarded() || !req.is_object() || !req.contains("target") ||
             !req["target"].is_string() || req["target"].get<std::string>().empty()) {
           return Error(400, "body must be {\"target\": \"host:port\" or \"unix:/path\"}");
         }
         const std::string target = req["target"].get<std::string>();
         absl::Status st = node->AddStore(target);
         if (!st.ok()) {
           return Error(st.code() == absl::StatusCode::kInvalidArgument ? 400 : 409,
                        std::string(st.message()));
         }
         return {200, nlohmann::json{{"added", target}}.dump()};
       }});
  return routes;
}

}  // namespace colibri::compute
