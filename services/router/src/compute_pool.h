// The compute nodes behind a router, and which one serves a request. Session affinity: a
// conversation's requests go to the node holding its KV — keyed by the session id (or the
// OpenAI `user`), or, without one, by the prompt's first kPrefixKeyTokens tokens. That prefix is
// the same for every turn once the first turn's prompt has that many tokens (a chat template's
// header plus a first message usually do); a shorter first turn may land on another node than
// its continuation, and sessionless conversations that share a long start (the same system
// prompt) share a node — and that start's KV. Clients that want affinity without those caveats
// send a session id.
// Nodes are ranked per key by rendezvous hashing, so adding or losing a node moves only the
// conversations that were on it. A node that answers UNAVAILABLE is skipped for a while and the
// request goes to the key's next node (its KV is rebuilt there by prefill). Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compute_client.h"

namespace colibri::router {

class ComputePool {
 public:
  // Prompt tokens that key a request without a session id.
  static constexpr size_t kPrefixKeyTokens = 32;

  explicit ComputePool(std::vector<std::unique_ptr<ComputeClient>> nodes,
                       std::chrono::milliseconds down_for = std::chrono::seconds(5));

  size_t size() const { return nodes_.size(); }
  ComputeClient& node(size_t i) { return *nodes_[i]->client; }

  // The affinity key of a request.
  static uint64_t Key(const std::string& session_id, const std::vector<int32_t>& prompt);
  // Nodes in the order to try for `key`: by rendezvous weight, nodes marked down last.
  std::vector<size_t> Order(uint64_t key) const;
  // Marks node i as failing (skipped by Order for `down_for`) or as answering again.
  void MarkDown(size_t i);
  void MarkUp(size_t i);
  // Requests each node served (for tests and metrics).
  uint64_t served(size_t i) const { return nodes_[i]->served.load(); }
  void CountServed(size_t i) { nodes_[i]->served++; }

 private:
  struct Node {
    std::unique_ptr<ComputeClient> client;
    std::atomic<int64_t> down_until_ns{0};
    std::atomic<uint64_t> served{0};
  };
  std::vector<std::unique_ptr<Node>> nodes_;
  const std::chrono::milliseconds down_for_;
};

}  // namespace colibri::router
