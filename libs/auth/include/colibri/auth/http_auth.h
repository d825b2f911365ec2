// API keys on HTTP listeners (the router's OpenAI API, the compute and store metrics ports):
// which paths need a key. One rule for every listener: GET /health is always open (probes);
// /metrics needs a key unless `metrics_public`; every other path needs a key. No key
// configured: everything is open.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "colibri/auth/api_keys.h"

namespace colibri::auth {

struct HttpPolicy {
  std::shared_ptr<const ApiKeys> keys;  // null or empty: open
  bool metrics_public = false;
};

// The caller's key identity ("" when open) for a request to `path` with this Authorization
// header value; Unauthenticated when a key is needed and missing or wrong.
absl::StatusOr<std::string> AuthorizeHttp(const HttpPolicy& policy, absl::string_view path,
                                          absl::string_view authorization);

}  // namespace colibri::auth
