// Finds expert stores by DNS name: `--store-dns expert-store:50051` resolves the name to every
// address it has (Docker Compose and Kubernetes headless Services answer with one A record per
// replica), and re-resolves it periodically, so `docker compose up --scale expert-store=N` adds
// stores to a running compute node without a restart.
//
// - Each Poll() resolves every name once and calls `add` with each "address:port" target it has
//   not seen before, in the resolver's order (first seen first). A target is added once for the
//   life of the object: one whose address leaves the DNS answer is reported as vanished and is
//   not added again when the address comes back (the compute node keeps it and probes it; the
//   stream to a store that went away breaks, which marks it down, see multi_store_source.h).
// - A failed resolution (the name has no replica yet, DNS down) adds nothing and is logged once
//   per change of error; later polls try again.
// - Start() runs Poll() every `interval` on a background thread until the object is destroyed.
// Thread-safe: Poll() may be called from any thread; `add` is called on the polling thread,
// never with the internal lock held.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace colibri::compute {

// Resolves a host name to its addresses (IPv4 dotted quads, IPv6 without brackets), in the
// order the resolver gives them, without duplicates.
using HostResolver =
    std::function<absl::StatusOr<std::vector<std::string>>(const std::string& host)>;

// getaddrinfo (TCP, IPv4 and IPv6). NotFound for an unknown name, Unavailable for a
// temporary failure.
absl::StatusOr<std::vector<std::string>> ResolveHost(const std::string& host);

// A "host:port" name to discover. InvalidArgument on a missing host or a bad port.
struct DnsName {
  std::string host;
  int port = 0;
};
absl::StatusOr<DnsName> ParseDnsName(const std::string& name);

// "10.0.0.3:50051", or "[fd00::3]:50051" for an IPv6 address.
std::string StoreTarget(const std::string& address, int port);

class StoreDiscovery {
 public:
  struct PollResult {
    std::vector<std::string> added;     // targets passed to `add` by this poll
    std::vector<std::string> vanished;  // known targets missing from this poll's answers
  };

  StoreDiscovery(std::vector<DnsName> names, HostResolver resolver,
                 std::function<void(const std::string&)> add);
  ~StoreDiscovery();
  StoreDiscovery(const StoreDiscovery&) = delete;
  StoreDiscovery& operator=(const StoreDiscovery&) = delete;

  // Marks targets as known without calling `add` (the stores a node started with).
  void MarkKnown(const std::vector<std::string>& targets);
  // Resolves every name once; see the contract above.
  PollResult Poll();
  // Every target resolved so far (the current answers), without polling.
  std::vector<std::string> Current() const;
  void Start(std::chrono::milliseconds interval);

 private:
  void Loop(std::chrono::milliseconds interval);

  const std::vector<DnsName> names_;
  const HostResolver resolver_;
  const std::function<void(const std::string&)> add_;
  mutable std::mutex mu_;
  std::mutex poll_mu_;                // one Poll at a time, so `add` sees targets in order
  std::set<std::string> known_;       // ever added (or marked known)
  std::vector<std::string> current_;  // the last poll's answers
  std::set<std::string> vanished_;    // known, missing from the last answers (logged once)
  std::string last_error_;
  bool stopping_ = false;
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace colibri::compute
