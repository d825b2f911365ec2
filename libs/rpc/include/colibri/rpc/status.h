// The one place where colibri's absl::Status meets the wire: gRPC status codes and HTTP /
// OpenAI error bodies.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace colibri::rpc {

grpc::Status ToGrpc(const absl::Status& status);
absl::Status FromGrpc(const grpc::Status& status);
absl::Status FromCode(int code, const std::string& message);

// HTTP status for an error: 400 InvalidArgument/FailedPrecondition/OutOfRange, 401
// Unauthenticated, 403 PermissionDenied, 404 NotFound, 429 ResourceExhausted, 499 Cancelled,
// 503 Unavailable, 504 DeadlineExceeded, 500 otherwise.
int HttpStatus(const absl::Status& status);

// OpenAI error JSON: {"error": {"message", "type", "param": null, "code"}}.
std::string OpenAiErrorBody(const absl::Status& status);
std::string OpenAiErrorBody(int http_status, const std::string& message, const std::string& type,
                            const std::string& code);

// Anthropic's error JSON: {"type": "error", "error": {"type", "message"}}, the type from the
// HTTP status (invalid_request_error, authentication_error, permission_error, not_found_error,
// request_too_large, rate_limit_error, overloaded_error, api_error).
std::string AnthropicErrorBody(const absl::Status& status);
std::string AnthropicErrorBody(int http_status, const std::string& message);

}  // namespace colibri::rpc
