#include "colibri/auth/http_auth.h"

namespace colibri::auth {

absl::StatusOr<std::string> AuthorizeHttp(const HttpPolicy& policy, absl::string_view path,
                                          absl::string_view authorization) {
  if (policy.keys == nullptr || policy.keys->empty()) return std::string();
  if (path == "/health") return std::string();
  if (path == "/metrics" && policy.metrics_public) return std::string();
  return policy.keys->Authenticate(authorization);
}

}  // namespace colibri::auth
