// API keys: the one authentication of every colibri entry point (the OpenAI HTTP API, /metrics
// and admin routes, the Router gRPC API). A request presents "Bearer KEY" (HTTP Authorization
// header, gRPC `authorization` metadata); the key is compared with every configured key in
// constant time, and the caller learns the key's identity ("key-1", "key-2", ...: its position
// among the configured keys, never the key itself), which owns what the request creates
// (router sessions).
//
// Keys come from --api-key (repeatable; also the COLIBRI_API_KEY environment variable, so the
// key is not in `ps`) and --api-key-file (one key per line; blank lines and lines starting with
// '#' are skipped). No key configured: everything is open (loopback use). Immutable after
// Load, so thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace colibri::auth {

// True when `a` and `b` are equal. The time taken depends only on the length of `a` (the value
// presented by a client), not on where the strings first differ nor on the content of `b`.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

// The KEY of an "Authorization: Bearer KEY" value (scheme case-insensitive); nullopt otherwise.
std::optional<absl::string_view> BearerToken(absl::string_view authorization);

class ApiKeys {
 public:
  ApiKeys() = default;  // no keys: open
  // `keys` as given on the command line, then the keys of `key_file` (when not empty).
  // InvalidArgument for an empty key, a key holding whitespace, a duplicate, or a key file
  // without a key; NotFound for an unreadable file. Warns when the file is readable by others.
  static absl::StatusOr<ApiKeys> Load(const std::vector<std::string>& keys,
                                      const std::string& key_file);

  bool empty() const { return keys_.empty(); }
  size_t size() const { return keys_.size(); }

  // The identity of `key` when it is one of the configured keys. Every configured key is
  // compared (no early exit), each in constant time.
  std::optional<std::string> Identify(absl::string_view key) const;
  // Identify on an Authorization value. OK with "" when no key is configured; Unauthenticated
  // (missing header, other scheme, wrong key) otherwise.
  absl::StatusOr<std::string> Authenticate(absl::string_view authorization) const;

 private:
  std::vector<std::string> keys_;
};

}  // namespace colibri::auth
