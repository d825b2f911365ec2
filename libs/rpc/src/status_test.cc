#include "colibri/rpc/status.h"

#include <gtest/gtest.h>

#include <string>

#include "nlohmann/json.hpp"

namespace colibri::rpc {
namespace {

using nlohmann::json;

constexpr absl::StatusCode kAllErrorCodes[] = {
    absl::StatusCode::kCancelled,          absl::StatusCode::kUnknown,
    absl::StatusCode::kInvalidArgument,    absl::StatusCode::kDeadlineExceeded,
    absl::StatusCode::kNotFound,           absl::StatusCode::kAlreadyExists,
    absl::StatusCode::kPermissionDenied,   absl::StatusCode::kResourceExhausted,
    absl::StatusCode::kFailedPrecondition, absl::StatusCode::kAborted,
    absl::StatusCode::kOutOfRange,         absl::StatusCode::kUnimplemented,
    absl::StatusCode::kInternal,           absl::StatusCode::kUnavailable,
    absl::StatusCode::kDataLoss,           absl::StatusCode::kUnauthenticated,
};

TEST(GrpcStatus, RoundTripsEveryCode) {
  for (absl::StatusCode code : kAllErrorCodes) {
    SCOPED_TRACE(absl::StatusCodeToString(code));
    const absl::Status s(code, "expert (layer 12, id 5) stripe 3: checksum mismatch");
    const grpc::Status g = ToGrpc(s);
    EXPECT_FALSE(g.ok());
    EXPECT_EQ(static_cast<int>(g.error_code()), static_cast<int>(code));
    EXPECT_EQ(g.error_message(), "expert (layer 12, id 5) stripe 3: checksum mismatch");
    const absl::Status back = FromGrpc(g);
    EXPECT_EQ(back, s);
  }
}

TEST(GrpcStatus, CodeNumbersAreTheCanonicalOnes) {
  EXPECT_EQ(ToGrpc(absl::NotFoundError("x")).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(ToGrpc(absl::DataLossError("x")).error_code(), grpc::StatusCode::DATA_LOSS);
  EXPECT_EQ(ToGrpc(absl::UnavailableError("x")).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(ToGrpc(absl::ResourceExhaustedError("x")).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(ToGrpc(absl::CancelledError("x")).error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(ToGrpc(absl::DeadlineExceededError("x")).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(FromGrpc(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad")),
            absl::InvalidArgumentError("bad"));
  EXPECT_EQ(FromGrpc(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "who")),
            absl::UnauthenticatedError("who"));
}

TEST(GrpcStatus, OkStaysOk) {
  EXPECT_TRUE(ToGrpc(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpc(grpc::Status::OK).ok());
  EXPECT_TRUE(FromCode(0, "ignored").ok());
}

TEST(GrpcStatus, UnknownCodeNumbersBecomeUnknown) {
  for (int code : {-1, 17, 100, 1 << 20}) {
    const absl::Status s = FromCode(code, "peer said something odd");
    EXPECT_EQ(s.code(), absl::StatusCode::kUnknown) << code;
    EXPECT_EQ(s.message(), "peer said something odd");
  }
  const absl::Status s = FromGrpc(grpc::Status(static_cast<grpc::StatusCode>(42), "future code"));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnknown);
  EXPECT_EQ(s.message(), "future code");
  for (int code = 1; code <= 16; ++code) {
    EXPECT_EQ(static_cast<int>(FromCode(code, "m").code()), code);
  }
}

TEST(HttpStatus, MapsEveryCode) {
  const std::pair<absl::StatusCode, int> table[] = {
      {absl::StatusCode::kOk, 200},
      {absl::StatusCode::kInvalidArgument, 400},
      {absl::StatusCode::kFailedPrecondition, 400},
      {absl::StatusCode::kOutOfRange, 400},
      {absl::StatusCode::kUnauthenticated, 401},
      {absl::StatusCode::kPermissionDenied, 403},
      {absl::StatusCode::kNotFound, 404},
      {absl::StatusCode::kResourceExhausted, 429},
      {absl::StatusCode::kCancelled, 499},
      {absl::StatusCode::kUnavailable, 503},
      {absl::StatusCode::kDeadlineExceeded, 504},
      {absl::StatusCode::kUnknown, 500},
      {absl::StatusCode::kAlreadyExists, 500},
      {absl::StatusCode::kAborted, 500},
      {absl::StatusCode::kUnimplemented, 500},
      {absl::StatusCode::kInternal, 500},
      {absl::StatusCode::kDataLoss, 500},
  };
  for (const auto& [code, http] : table) {
    EXPECT_EQ(HttpStatus(absl::Status(code, "m")), http) << absl::StatusCodeToString(code);
  }
  EXPECT_EQ(HttpStatus(absl::OkStatus()), 200);
}

// The OpenAI error shape: {"error": {"message", "type", "param": null, "code"}} and nothing else.
void ExpectOpenAiShape(const std::string& body, const std::string& message, const std::string& type,
                       const std::string& code) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << body;
  ASSERT_TRUE(j.is_object());
  ASSERT_EQ(j.size(), 1u) << body;
  ASSERT_TRUE(j.contains("error"));
  const json& e = j["error"];
  ASSERT_TRUE(e.is_object());
  EXPECT_EQ(e.size(), 4u) << body;
  ASSERT_TRUE(e["message"].is_string());
  EXPECT_EQ(e["message"], message);
  EXPECT_EQ(e["type"], type);
  ASSERT_TRUE(e.contains("param"));
  EXPECT_TRUE(e["param"].is_null());
  EXPECT_EQ(e["code"], code);
}

TEST(OpenAiErrorBody, ShapeTypeAndCodePerStatus) {
  struct Case {
    absl::Status status;
    const char* type;
    const char* code;
  };
  const Case cases[] = {
      {absl::InvalidArgumentError("'temperature': must be a number"), "invalid_request_error",
       "invalid_argument"},
      {absl::FailedPreconditionError("f"), "invalid_request_error", "failed_precondition"},
      {absl::OutOfRangeError("o"), "invalid_request_error", "out_of_range"},
      {absl::NotFoundError("The model 'x' does not exist"), "invalid_request_error", "not_found"},
      {absl::UnauthenticatedError("u"), "authentication_error", "unauthenticated"},
      {absl::ResourceExhaustedError("queue full"), "rate_limit_error", "resource_exhausted"},
      {absl::PermissionDeniedError("p"), "server_error", "permission_denied"},
      {absl::UnavailableError("compute down"), "server_error", "unavailable"},
      {absl::DeadlineExceededError("d"), "server_error", "deadline_exceeded"},
      {absl::CancelledError("c"), "server_error", "cancelled"},
      {absl::InternalError("bug"), "server_error", "internal"},
      {absl::DataLossError("checksum"), "server_error", "data_loss"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.status.ToString());
    ExpectOpenAiShape(OpenAiErrorBody(c.status), std::string(c.status.message()), c.type, c.code);
  }
}

TEST(OpenAiErrorBody, MessagesAreEscaped) {
  const std::string msg = "say \"hi\"\n\\ back\tslash ☃ </script>";
  ExpectOpenAiShape(OpenAiErrorBody(absl::InvalidArgumentError(msg)), msg, "invalid_request_error",
                    "invalid_argument");
}

TEST(OpenAiErrorBody, InvalidUtf8InAMessageStillGivesValidJson) {
  const std::string body =
      OpenAiErrorBody(absl::InvalidArgumentError("text is not valid UTF-8: \xff\xfe"));
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << body;
  const std::string msg = j["error"]["message"];
  EXPECT_EQ(msg.rfind("text is not valid UTF-8: ", 0), 0u) << msg;
  EXPECT_NE(msg.find("\xEF\xBF\xBD"), std::string::npos)
      << msg;  // U+FFFD in place of the bad bytes
}

TEST(OpenAiErrorBody, ExplicitFields) {
  ExpectOpenAiShape(OpenAiErrorBody(404, "no such route", "invalid_request_error", "not_found"),
                    "no such route", "invalid_request_error", "not_found");
  ExpectOpenAiShape(OpenAiErrorBody(500, "", "server_error", ""), "", "server_error", "");
}

TEST(AnthropicErrorBody, ShapeAndTypePerStatus) {
  const std::pair<absl::Status, const char*> cases[] = {
      {absl::InvalidArgumentError("'max_tokens': is required"), "invalid_request_error"},
      {absl::UnauthenticatedError("u"), "authentication_error"},
      {absl::PermissionDeniedError("p"), "permission_error"},
      {absl::NotFoundError("The model 'x' does not exist"), "not_found_error"},
      {absl::ResourceExhaustedError("queue full"), "rate_limit_error"},
      {absl::UnavailableError("compute down"), "overloaded_error"},
      {absl::InternalError("bug \xff"), "api_error"},
  };
  for (const auto& [status, type] : cases) {
    SCOPED_TRACE(status.ToString());
    const json j = json::parse(AnthropicErrorBody(status), nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j.size(), 2u);
    EXPECT_EQ(j["type"], "error");
    EXPECT_EQ(j["error"].size(), 2u);
    EXPECT_EQ(j["error"]["type"], type);
    EXPECT_EQ(j["error"]["message"].get<std::string>().substr(0, 3),
              std::string(status.message()).substr(0, 3));
  }
  EXPECT_EQ(json::parse(AnthropicErrorBody(413, "too big"))["error"]["type"], "request_too_large");
}

}  // namespace
}  // namespace colibri::rpc
