#include "colibri/auth/flags.h"

#include "colibri/auth/address.h"

namespace colibri::auth {

void AddKeyFlags(CLI::App* app, KeyFlags* flags) {
  auto* g = app->add_option_group("Authentication");
  g->add_option(
       "--api-key", flags->api_keys,
       "Require 'Authorization: Bearer KEY' (HTTP) / 'authorization: Bearer KEY' (gRPC metadata) "
       "(repeatable; also from $COLIBRI_API_KEY, which keeps the key out of ps)")
      ->envname("COLIBRI_API_KEY");
  g->add_option(
      "--api-key-file", flags->api_key_file,
      "File of API keys, one per line ('#' comments and blank lines skipped); each key owns the "
      "sessions it creates");
  g->add_flag("--metrics-public", flags->metrics_public,
              "Serve /metrics without a key when keys are set");
}

void AddTlsFlags(CLI::App* app, TlsFiles* files) {
  auto* g = app->add_option_group("Transport security");
  g->add_option("--tls-cert", files->cert,
                "PEM certificate of this service (mutual TLS on the gRPC links)")
      ->envname("COLIBRI_TLS_CERT");
  g->add_option("--tls-key", files->key, "PEM private key of --tls-cert")
      ->envname("COLIBRI_TLS_KEY");
  g->add_option("--tls-ca", files->ca, "PEM CA certificate that signs every peer's certificate")
      ->envname("COLIBRI_TLS_CA");
  g->add_option("--tls-server-name", files->server_name,
                "Name expected in the servers' certificates (default: the host of each address)")
      ->envname("COLIBRI_TLS_SERVER_NAME");
  g->add_flag("--insecure", files->insecure,
              "Allow plaintext gRPC on non-loopback addresses (only on a network you trust; no "
              "effect with TLS)");
}

void AddSecurityFlags(CLI::App* app, SecurityFlags* flags) {
  AddKeyFlags(app, &flags->keys);
  AddTlsFlags(app, &flags->tls);
}

absl::StatusOr<Security> LoadSecurity(const SecurityFlags& flags) {
  auto loaded = ApiKeys::Load(flags.keys.api_keys, flags.keys.api_key_file);
  if (!loaded.ok()) return loaded.status();
  auto transport = Transport::Create(flags.tls);
  if (!transport.ok()) return transport.status();
  return Security{std::make_shared<const ApiKeys>(std::move(*loaded)), std::move(*transport),
                  flags.keys.metrics_public};
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Security::ListenerCredentials(
    const std::string& listen, const char* what) const {
  auto credentials = transport->ServerCredentials(listen);
  if (!credentials.ok()) return credentials.status();
  if (auto hp = ParseHostPort(listen); hp.ok() && what != nullptr)
    WarnIfOpen(what, hp->host, has_keys());
  return credentials;
}

}  // namespace colibri::auth
