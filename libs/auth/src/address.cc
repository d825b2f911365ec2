#include "colibri/auth/address.h"

#include <arpa/inet.h>

#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace colibri::auth {

absl::StatusOr<HostPort> ParseHostPort(absl::string_view address) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("address '", address, "': ", why, " (expected host:port)"));
  };
  HostPort out;
  absl::string_view port;
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    if (close == absl::string_view::npos || close + 1 >= address.size() ||
        address[close + 1] != ':') {
      return bad("an IPv6 address needs the form [addr]:port");
    }
    out.host = std::string(address.substr(1, close - 1));
    in6_addr a6{};
    if (inet_pton(AF_INET6, out.host.c_str(), &a6) != 1)
      return bad("not an IPv6 address in the brackets");
    port = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == absl::string_view::npos) return bad("no port");
    out.host = std::string(address.substr(0, colon));
    port = address.substr(colon + 1);
    if (out.host.empty()) return bad("no host");
    if (out.host.size() > 253) return bad("host name longer than 253 characters");
    for (char c : out.host) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') {
        return bad("the host holds a character other than letters, digits, '.', '-', '_'");
      }
    }
  }
  int p = -1;
  if (port.empty() || port.size() > 5 || !absl::SimpleAtoi(port, &p) || p < 0 || p > 65535 ||
      !absl::ascii_isdigit(static_cast<unsigned char>(port.front()))) {
    return bad("the port must be a number in 0..65535");
  }
  out.port = p;
  return out;
}

bool IsUnixAddress(absl::string_view address) {
  return absl::StartsWith(address, "unix:") || absl::StartsWith(address, "unix-abstract:");
}

bool IsLoopbackHost(absl::string_view host) {
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  const std::string h(host);
  in_addr a4{};
  if (inet_pton(AF_INET, h.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  in6_addr a6{};
  if (inet_pton(AF_INET6, h.c_str(), &a6) == 1) {
    static const in6_addr kLoopback = IN6ADDR_LOOPBACK_INIT;
    return std::memcmp(&a6, &kLoopback, sizeof(a6)) == 0;
  }
  return false;
}

bool IsLoopbackAddress(absl::string_view address) {
  if (IsUnixAddress(address)) return true;
  auto hp = ParseHostPort(address);
  return hp.ok() && IsLoopbackHost(hp->host);
}

absl::Status ValidateTarget(absl::string_view target) {
  if (absl::StartsWith(target, "unix:")) {
    const absl::string_view path = target.substr(5);
    if (path.empty() || path.front() != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("target '", target, "': unix: needs an absolute path"));
    }
    for (char c : path) {
      if (absl::ascii_iscntrl(static_cast<unsigned char>(c))) {
        return absl::InvalidArgumentError(
            absl::StrCat("target '", target, "': control character in the path"));
      }
    }
    return absl::OkStatus();
  }
  auto hp = ParseHostPort(target);
  if (!hp.ok()) return hp.status();
  if (hp->port == 0)
    return absl::InvalidArgumentError(absl::StrCat("target '", target, "': port 0"));
  return absl::OkStatus();
}

void WarnIfOpen(absl::string_view what, absl::string_view host, bool has_keys) {
  if (has_keys || IsLoopbackHost(host)) return;
  spdlog::warn(
      "{} listens on {} with no API key: anyone who reaches it can use it (set --api-key-file or "
      "--api-key, or bind 127.0.0.1)",
      std::string(what), std::string(host));
}

bool AdminRoutesAllowed(absl::string_view what, absl::string_view host, bool has_keys) {
  if (has_keys || IsLoopbackHost(host)) return true;
  spdlog::warn(
      "{} on {}: admin routes (/admin/...) are off: they need an API key (--api-key-file) on a "
      "non-loopback listener",
      std::string(what), std::string(host));
  return false;
}

}  // namespace colibri::auth
