// Transport security of the cluster links (router -> compute -> expert stores, and the Router
// gRPC API): one place that turns --tls-cert/--tls-key/--tls-ca into server and channel
// credentials, so every service makes them the same way.
//
// - With TLS configured, TCP listeners require and verify a client certificate signed by the
//   CA (mutual TLS), and channels present their certificate and verify the server's against
//   the CA (host name checked against the target's host, or --tls-server-name).
// - Unix sockets are always plaintext (local trust; shared memory needs the same host).
// - Without TLS, plaintext is allowed only on loopback addresses; a non-loopback listen or peer
//   address fails (InvalidArgument naming the flags) unless --insecure was given.
// Immutable after Create, so thread-safe; the PEM files are read once, at Create.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace colibri::auth {

struct TlsFiles {
  std::string cert;         // PEM certificate chain of this service (server and client side)
  std::string key;          // PEM private key of `cert`
  std::string ca;           // PEM CA that signs every peer's certificate
  std::string server_name;  // expected name in servers' certificates (default: the target's host)
  bool insecure = false;    // allow plaintext on non-loopback addresses
};

class Transport {
 public:
  // InvalidArgument when only some of cert/key/ca are given; NotFound for an unreadable file.
  static absl::StatusOr<std::shared_ptr<const Transport>> Create(const TlsFiles& files);
  // Plaintext, for loopback and unix sockets only (tests, in-process tools).
  static std::shared_ptr<const Transport> Plaintext();

  bool tls() const { return !cert_.empty(); }

  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
      const std::string& listen) const;
  // A channel to `target` (validated: host:port or unix:/path) with `args`.
  absl::StatusOr<std::shared_ptr<grpc::Channel>> Channel(const std::string& target,
                                                         grpc::ChannelArguments args = {}) const;

 private:
  Transport() = default;
  // OK when plaintext may be used on `address` (`role`: "listen" / "connect to").
  absl::Status CheckPlaintext(const std::string& address, const char* role) const;

  std::string cert_, key_, ca_;  // PEM contents
  std::string server_name_;
  bool insecure_ = false;
};

}  // namespace colibri::auth
