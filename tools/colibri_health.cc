// colibri-health: the container health check of every colibri image (slim images carry no curl
// and no grpc_health_probe).
//
//   colibri-health grpc HOST:PORT [--service NAME] [--timeout 3]   grpc.health.v1.Health/Check
//       [--tls-cert F --tls-key F --tls-ca F]   (a service with mutual TLS: its own files)
//   colibri-health http HOST:PORT [--path /health] [--timeout 3]   GET, expects 200
//
// Exit status: 0 healthy (SERVING / 200), 1 not healthy (answered, but not serving), 2 no answer
// or bad usage. Prints one line saying which.
#include <chrono>
#include <cstdio>
#include <future>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "colibri/auth/flags.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "httplib.h"

namespace {

// grpc.health.v1.HealthCheckRequest {string service = 1;} in protobuf wire format.
std::string EncodeRequest(const std::string& service) {
  std::string out;
  if (service.empty()) return out;
  out.push_back(0x0a);  // field 1, length-delimited
  size_t n = service.size();
  while (n >= 0x80) {
    out.push_back(static_cast<char>((n & 0x7f) | 0x80));
    n >>= 7;
  }
  out.push_back(static_cast<char>(n));
  return out + service;
}

// HealthCheckResponse {ServingStatus status = 1;}: the status varint, 0 (UNKNOWN) when absent.
int DecodeStatus(const std::string& bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    const auto key = static_cast<unsigned char>(bytes[i++]);
    if (key == 0x08) {
      int v = 0, shift = 0;
      while (i < bytes.size()) {
        const auto b = static_cast<unsigned char>(bytes[i++]);
        v |= (b & 0x7f) << shift;
        if ((b & 0x80) == 0) return v;
        shift += 7;
      }
      return -1;
    }
    return -1;  // no other field is defined
  }
  return 0;
}

int CheckGrpc(const std::string& target, const std::string& service, double timeout_s,
              const colibri::auth::TlsFiles& tls) {
  auto transport = colibri::auth::Transport::Create(tls);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      transport.ok() ? (*transport)->Channel(target)
                     : absl::StatusOr<std::shared_ptr<grpc::Channel>>(transport.status());
  if (!channel.ok()) {
    std::printf("%s: %s\n", target.c_str(), std::string(channel.status().message()).c_str());
    return 2;
  }
  grpc::GenericStub stub(*channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  const std::string req_bytes = EncodeRequest(service);
  grpc::Slice slice(req_bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status s) { done.set_value(std::move(s)); });
  const grpc::Status st = done.get_future().get();
  if (!st.ok()) {
    std::printf("%s: no health answer: %s\n", target.c_str(), st.error_message().c_str());
    return 2;
  }
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (response.Dump(&slices).ok()) {
    for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  const int status = DecodeStatus(bytes);
  static const char* kNames[] = {"UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"};
  const char* name = status >= 0 && status <= 3 ? kNames[status] : "malformed answer";
  std::printf("%s%s%s: %s\n", target.c_str(), service.empty() ? "" : " ", service.c_str(), name);
  return status == 1 ? 0 : 1;
}

int CheckHttp(const std::string& target, const std::string& path, double timeout_s) {
  httplib::Client client("http://" + target);
  const auto t = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  client.set_connection_timeout(t);
  client.set_read_timeout(t);
  auto res = client.Get(path);
  if (!res) {
    std::printf("http://%s%s: no answer (%s)\n", target.c_str(), path.c_str(),
                httplib::to_string(res.error()).c_str());
    return 2;
  }
  std::printf("http://%s%s: %d\n", target.c_str(), path.c_str(), res->status);
  return res->status == 200 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"colibri-health: health check of a colibri service (container HEALTHCHECK)"};
  app.require_subcommand(1);
  std::string target, service, path = "/health";
  double timeout_s = 3;
  auto* grpc_cmd = app.add_subcommand("grpc", "grpc.health.v1.Health/Check; healthy when SERVING");
  grpc_cmd->add_option("target", target, "host:port")->required();
  grpc_cmd->add_option("--service", service,
                       "Service name to check (default: the server as a whole)");
  grpc_cmd->add_option("--timeout", timeout_s, "Seconds")->capture_default_str();
  colibri::auth::TlsFiles tls;
  colibri::auth::AddTlsFlags(grpc_cmd, &tls);
  auto* http_cmd = app.add_subcommand("http", "HTTP GET; healthy on 200");
  http_cmd->add_option("target", target, "host:port")->required();
  http_cmd->add_option("--path", path, "Path")->capture_default_str();
  http_cmd->add_option("--timeout", timeout_s, "Seconds")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (grpc_cmd->parsed()) return CheckGrpc(target, service, timeout_s, tls);
  return CheckHttp(target, path, timeout_s);
}
