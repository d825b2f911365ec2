#include "colibri/auth/grpc_auth.h"

namespace colibri::auth {

absl::StatusOr<std::string> Authenticate(const ApiKeys* keys, const grpc::ServerContextBase& ctx) {
  if (keys == nullptr || keys->empty()) return std::string();
  const auto& md = ctx.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end())
    return absl::UnauthenticatedError("missing 'authorization: Bearer <key>' metadata");
  return keys->Authenticate(absl::string_view(it->second.data(), it->second.size()));
}

}  // namespace colibri::auth
