// The compute nodes behind a router, and which one serves a request. Session affinity: a
// conversation's requests go to the node holding its KV — keyed by the session id (or the
// OpenAI `user`); for chats without one, by their messages up to the first user message
// (ChatKey: the same in every turn); otherwise by the prompt's first kPrefixKeyTokens tokens,
// the same for every turn once the first turn's prompt has that many tokens (a shorter first
// turn may land on another node than its continuation). Sessionless requests sharing a long
// start share a node — and that start's KV.
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

#include "colibri/tokenizer/chat.h"
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
  // For a chat without a session id: the messages up to and including the first user message,
  // the same in every turn of the conversation however short its first turn (0 when there is no
  // user message: then Key applies).
  static uint64_t ChatKey(const std::vector<tokenizer::ChatMessage>& messages);
  // Nodes in the order to try for `key`: by rendezvous weight, nodes marked down last.
  std::vector<size_t> Order(uint64_t key) const;
  // Marks node i as failing (skipped by Order for `down_for`) or as answering again.
  void MarkDown(size_t i);
  void MarkUp(size_t i);

  // Runs `request` on the nodes in Order(key): `hints` (may be empty) go to the first as an
  // advisory Prefetch (a node UNAVAILABLE to it is marked down and skipped); a node answering
  // UNAVAILABLE before any token reached on_token is marked down and the next one tried; the
  // node that answers is marked up. The last node's error otherwise.
  absl::StatusOr<ComputeResult> Generate(
      uint64_t key, const ComputeRequest& request,
      const std::vector<expert_source::ExpertId>& hints,
      const std::function<bool(const generation::SampledToken&)>& on_token);

 private:
  struct Node {
    std::unique_ptr<ComputeClient> client;
    std::atomic<int64_t> down_until_ns{0};
  };
  std::vector<std::unique_ptr<Node>> nodes_;
  const std::chrono::milliseconds down_for_;
};

}  // namespace colibri::router
