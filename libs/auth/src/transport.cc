#include "colibri/auth/transport.h"

#include "absl/strings/str_cat.h"
#include "colibri/auth/address.h"
#include "colibri/core/file_util.h"
#include "spdlog/spdlog.h"

namespace colibri::auth {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  auto text = ReadFileToString(path);
  if (!text.ok())
    return absl::NotFoundError(absl::StrCat(flag, " ", path, ": ", text.status().message()));
  if (text->find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": not a PEM file"));
  }
  return text;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Transport>> Transport::Create(const TlsFiles& files) {
  auto t = std::shared_ptr<Transport>(new Transport());
  t->insecure_ = files.insecure;
  t->server_name_ = files.server_name;
  const int given = !files.cert.empty() + !files.key.empty() + !files.ca.empty();
  if (given == 0) return std::shared_ptr<const Transport>(std::move(t));
  if (given != 3) {
    return absl::InvalidArgumentError(
        "TLS needs all of --tls-cert, --tls-key and --tls-ca (mutual TLS: every peer is verified "
        "against the CA)");
  }
  auto cert = ReadPem(files.cert, "--tls-cert");
  if (!cert.ok()) return cert.status();
  auto key = ReadPem(files.key, "--tls-key");
  if (!key.ok()) return key.status();
  auto ca = ReadPem(files.ca, "--tls-ca");
  if (!ca.ok()) return ca.status();
  t->cert_ = std::move(*cert);
  t->key_ = std::move(*key);
  t->ca_ = std::move(*ca);
  return std::shared_ptr<const Transport>(std::move(t));
}

std::shared_ptr<const Transport> Transport::Plaintext() {
  return std::shared_ptr<const Transport>(new Transport());
}

absl::Status Transport::CheckPlaintext(const std::string& address, const char* role) const {
  if (IsLoopbackAddress(address)) return absl::OkStatus();
  if (insecure_) {
    spdlog::warn("plaintext gRPC on {} ({}, --insecure): traffic and peers are not authenticated",
                 address, role);
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "refusing to ", role, " ", address,
      " without TLS: it is not a loopback address. Give --tls-cert, --tls-key and --tls-ca "
      "(mutual TLS), or --insecure to use plaintext on a network you trust"));
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Transport::ServerCredentials(
    const std::string& listen) const {
  if (IsUnixAddress(listen)) return grpc::InsecureServerCredentials();
  if (!IsLoopbackAddress(listen)) {
    if (auto hp = ParseHostPort(listen); !hp.ok()) return hp.status();
  }
  if (!tls()) {
    if (auto st = CheckPlaintext(listen, "listen on"); !st.ok()) return st;
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions o(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = ca_;
  o.pem_key_cert_pairs.push_back({key_, cert_});
  return grpc::SslServerCredentials(o);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> Transport::Channel(
    const std::string& target, grpc::ChannelArguments args) const {
  if (auto st = ValidateTarget(target); !st.ok()) return st;
  if (IsUnixAddress(target))
    return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  if (!tls()) {
    if (auto st = CheckPlaintext(target, "connect to"); !st.ok()) return st;
    return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  }
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = ca_;
  o.pem_private_key = key_;
  o.pem_cert_chain = cert_;
  if (!server_name_.empty()) args.SetSslTargetNameOverride(server_name_);
  return grpc::CreateCustomChannel(target, grpc::SslCredentials(o), args);
}

}  // namespace colibri::auth
