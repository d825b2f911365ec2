#include "store_discovery.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <charconv>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"

namespace colibri::compute {

absl::StatusOr<std::vector<std::string>> ResolveHost(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0) {
    const std::string why = absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc));
    if (rc == EAI_AGAIN) return absl::UnavailableError(why);
    return absl::NotFoundError(why);
  }
  std::vector<std::string> out;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    char buf[INET6_ADDRSTRLEN] = {};
    const void* addr = nullptr;
    if (a->ai_family == AF_INET) {
      addr = &reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr;
    } else if (a->ai_family == AF_INET6) {
      addr = &reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr;
    } else {
      continue;
    }
    if (inet_ntop(a->ai_family, addr, buf, sizeof(buf)) == nullptr) continue;
    std::string s = buf;
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(std::move(s));
  }
  freeaddrinfo(res);
  if (out.empty())
    return absl::NotFoundError(absl::StrCat("'", host, "' has no IPv4 or IPv6 address"));
  return out;
}

absl::StatusOr<DnsName> ParseDnsName(const std::string& name) {
  const size_t colon = name.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == name.size()) {
    return absl::InvalidArgumentError(absl::StrCat("--store-dns '", name, "': expected host:port"));
  }
  DnsName out;
  out.host = name.substr(0, colon);
  const std::string port = name.substr(colon + 1);
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), out.port);
  if (ec != std::errc() || end != port.data() + port.size() || out.port <= 0 || out.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--store-dns '", name, "': port must be 1..65535"));
  }
  return out;
}

std::string StoreTarget(const std::string& address, int port) {
  if (address.find(':') != std::string::npos) return absl::StrCat("[", address, "]:", port);
  return absl::StrCat(address, ":", port);
}

StoreDiscovery::StoreDiscovery(std::vector<DnsName> names, HostResolver resolver,
                               std::function<void(const std::string&)> add)
    : names_(std::move(names)), resolver_(std::move(resolver)), add_(std::move(add)) {}

StoreDiscovery::~StoreDiscovery() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StoreDiscovery::MarkKnown(const std::vector<std::string>& targets) {
  std::lock_guard<std::mutex> lock(mu_);
  known_.insert(targets.begin(), targets.end());
}

StoreDiscovery::PollResult StoreDiscovery::Poll() {
  std::lock_guard<std::mutex> poll_lock(poll_mu_);
  std::vector<std::string> answers;
  std::vector<std::string> errors;
  for (const auto& n : names_) {
    auto addrs = resolver_(n.host);
    if (!addrs.ok()) {
      errors.push_back(std::string(addrs.status().message()));
      continue;
    }
    for (const auto& a : *addrs) {
      std::string t = StoreTarget(a, n.port);
      if (std::find(answers.begin(), answers.end(), t) == answers.end())
        answers.push_back(std::move(t));
    }
  }
  PollResult result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string error = absl::StrJoin(errors, "; ");
    if (error != last_error_ && !error.empty()) spdlog::warn("store discovery: {}", error);
    last_error_ = error;
    for (const auto& t : answers) {
      if (known_.insert(t).second) result.added.push_back(t);
    }
    // A name that failed to resolve says nothing about its stores: only names that answered
    // can make a target vanish, so vanished targets are judged when every name answered.
    if (errors.empty()) {
      for (const auto& t : known_) {
        if (std::find(answers.begin(), answers.end(), t) != answers.end()) {
          vanished_.erase(t);
        } else {
          result.vanished.push_back(t);
          if (vanished_.insert(t).second) {
            spdlog::warn(
                "store discovery: {} left the DNS answer; it stays known and is probed while down",
                t);
          }
        }
      }
      current_ = answers;
    }
  }
  for (const auto& t : result.added) {
    spdlog::info("store discovery: adding expert store {}", t);
    add_(t);
  }
  return result;
}

std::vector<std::string> StoreDiscovery::Current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

void StoreDiscovery::Start(std::chrono::milliseconds interval) {
  thread_ = std::thread([this, interval] { Loop(interval); });
}

void StoreDiscovery::Loop(std::chrono::milliseconds interval) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (cv_.wait_for(lock, interval, [&] { return stopping_; })) break;
    lock.unlock();
    Poll();
    lock.lock();
  }
}

}  // namespace colibri::compute
