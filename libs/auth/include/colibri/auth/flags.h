// The security flags every colibri binary shares, defined once: API keys and mutual TLS.
//
//   --api-key KEY (repeatable; env COLIBRI_API_KEY)  --api-key-file FILE  --metrics-public
//   --tls-cert FILE --tls-key FILE --tls-ca FILE [--tls-server-name NAME]  --insecure
//   (the TLS options also from $COLIBRI_TLS_CERT, _KEY, _CA, _SERVER_NAME: one compose or k8s
//   environment turns TLS on without touching the commands)
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "colibri/auth/api_keys.h"
#include "colibri/auth/http_auth.h"
#include "colibri/auth/transport.h"

namespace colibri::auth {

struct KeyFlags {
  std::vector<std::string> api_keys;
  std::string api_key_file;
  bool metrics_public = false;  // /metrics answers without a key
};

void AddKeyFlags(CLI::App* app, KeyFlags* flags);
void AddTlsFlags(CLI::App* app, TlsFiles* files);

// Both groups: what every service binary takes (colibri-health takes only the TLS one).
struct SecurityFlags {
  KeyFlags keys;
  TlsFiles tls;
};
void AddSecurityFlags(CLI::App* app, SecurityFlags* flags);

// What the flags configure, loaded once and shared by every listener of the binary.
struct Security {
  std::shared_ptr<const ApiKeys> keys;
  std::shared_ptr<const Transport> transport;
  bool metrics_public = false;

  bool has_keys() const { return !keys->empty(); }
  HttpPolicy http() const { return {keys, metrics_public}; }
  // Credentials for a gRPC listener (see Transport::ServerCredentials), warning when `listen`
  // is reachable from other hosts and no key guards `what` (a service with an API).
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ListenerCredentials(
      const std::string& listen, const char* what) const;
};

// The keys (ApiKeys::Load) and the transport (Transport::Create) the flags name; the error
// names the flag.
absl::StatusOr<Security> LoadSecurity(const SecurityFlags& flags);

}  // namespace colibri::auth
