// Listen and peer addresses: what is loopback (trusted without TLS) and what is a well-formed
// target. Addresses are "host:port" (IPv6 in brackets: "[::1]:50051") or "unix:/path".
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace colibri::auth {

struct HostPort {
  std::string host;  // without IPv6 brackets
  int port = 0;
};

// "host:port" with a port in 0..65535 and a host of letters, digits, '.', '-', '_' (or an IPv6
// literal in brackets). InvalidArgument naming the address otherwise.
absl::StatusOr<HostPort> ParseHostPort(absl::string_view address);

bool IsUnixAddress(absl::string_view address);  // "unix:..." or "unix-abstract:..."

// localhost, 127.0.0.0/8 or ::1. Any other name, and 0.0.0.0 / ::, count as not loopback.
bool IsLoopbackHost(absl::string_view host);

// A unix: address, or host:port whose host is loopback.
bool IsLoopbackAddress(absl::string_view address);

// A target a client may connect to: "unix:/absolute/path", or host:port with port 1..65535.
absl::Status ValidateTarget(absl::string_view target);

// Logs a warning when `host` (an HTTP bind address) is not loopback and no API key guards it.
void WarnIfOpen(absl::string_view what, absl::string_view host, bool has_keys);

// Admin routes (cache clear, adding stores) are served only behind an API key or on a loopback
// listener: false (with a warning naming `what`) for a non-loopback `host` without keys.
bool AdminRoutesAllowed(absl::string_view what, absl::string_view host, bool has_keys);

}  // namespace colibri::auth
