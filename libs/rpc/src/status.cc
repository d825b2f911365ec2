#include "colibri/rpc/status.h"

#include "nlohmann/json.hpp"

namespace colibri::rpc {

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbering.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromCode(int code, const std::string& message) {
  if (code == 0) return absl::OkStatus();
  if (code < 0 || code > 16) code = static_cast<int>(absl::StatusCode::kUnknown);
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

absl::Status FromGrpc(const grpc::Status& status) {
  return FromCode(static_cast<int>(status.error_code()), status.error_message());
}

int HttpStatus(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk: return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kCancelled: return 499;
    case absl::StatusCode::kUnavailable: return 503;
    case absl::StatusCode::kDeadlineExceeded: return 504;
    default: return 500;
  }
}

std::string OpenAiErrorBody(int http_status, const std::string& message, const std::string& type,
                            const std::string& code) {
  nlohmann::json j = {
      {"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", code}}}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string OpenAiErrorBody(const absl::Status& status) {
  const int http = HttpStatus(status);
  std::string type = http == 400 || http == 404 ? "invalid_request_error"
                     : http == 401              ? "authentication_error"
                     : http == 429              ? "rate_limit_error"
                                                : "server_error";
  std::string code = absl::StatusCodeToString(status.code());
  for (auto& ch : code) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return OpenAiErrorBody(http, std::string(status.message()), type, code);
}

std::string AnthropicErrorBody(int http_status, const std::string& message) {
  const char* type = http_status == 400 || http_status == 415 ? "invalid_request_error"
                     : http_status == 401                     ? "authentication_error"
                     : http_status == 403                     ? "permission_error"
                     : http_status == 404                     ? "not_found_error"
                     : http_status == 413                     ? "request_too_large"
                     : http_status == 429                     ? "rate_limit_error"
                     : http_status == 503                     ? "overloaded_error"
                                                              : "api_error";
  nlohmann::json j = {{"type", "error"}, {"error", {{"type", type}, {"message", message}}}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string AnthropicErrorBody(const absl::Status& status) {
  return AnthropicErrorBody(HttpStatus(status), std::string(status.message()));
}

}  // namespace colibri::rpc
