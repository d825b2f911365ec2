// API keys on gRPC: every RPC of an authenticated service calls Authenticate first. (A C++
// server interceptor cannot fail a call, and an AuthMetadataProcessor cannot be set on
// plaintext credentials, so the check is this one function, at the entry of each method; a test
// walks the service descriptor so a new RPC without it fails.)
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "colibri/auth/api_keys.h"
#include "grpcpp/grpcpp.h"

namespace colibri::auth {

// The identity of the key in the call's `authorization` metadata ("" when `keys` is null or
// empty). Unauthenticated otherwise.
absl::StatusOr<std::string> Authenticate(const ApiKeys* keys, const grpc::ServerContextBase& ctx);

}  // namespace colibri::auth
