#include "compute_pool.h"

#include <algorithm>

#include "colibri/core/checksum.h"

namespace colibri::router {
namespace {

int64_t NowNs() { return std::chrono::steady_clock::now().time_since_epoch().count(); }

// SplitMix64 finaliser: a well-mixed weight for (key, node).
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

ComputePool::ComputePool(std::vector<std::unique_ptr<ComputeClient>> nodes,
                         std::chrono::milliseconds down_for)
    : down_for_(down_for) {
  for (auto& c : nodes) {
    auto n = std::make_unique<Node>();
    n->client = std::move(c);
    nodes_.push_back(std::move(n));
  }
}

uint64_t ComputePool::Key(const std::string& session_id, const std::vector<int32_t>& prompt) {
  if (!session_id.empty()) return Checksum64(session_id.data(), session_id.size());
  const size_t n = std::min(prompt.size(), kPrefixKeyTokens);
  return Mix(Checksum64(prompt.data(), n * sizeof(int32_t)));
}

uint64_t ComputePool::ChatKey(const std::vector<tokenizer::ChatMessage>& messages) {
  uint64_t key = 0x636f6c69627269ull;  // any non-zero start
  for (const auto& m : messages) {
    key = Mix(key ^ Checksum64(m.role.data(), m.role.size()));
    key = Mix(key ^ Checksum64(m.content.data(), m.content.size()));
    if (m.role == "user") return key == 0 ? 1 : key;
  }
  return 0;
}

std::vector<size_t> ComputePool::Order(uint64_t key) const {
  const int64_t now = NowNs();
  std::vector<std::pair<std::pair<bool, uint64_t>, size_t>> ranked;  // ((down, -weight), node)
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const bool down = nodes_[i]->down_until_ns.load() > now;
    ranked.push_back({{down, ~Mix(key ^ Mix(i + 1))}, i});
  }
  std::sort(ranked.begin(), ranked.end());
  std::vector<size_t> out;
  for (const auto& r : ranked) out.push_back(r.second);
  return out;
}

void ComputePool::MarkDown(size_t i) {
  nodes_[i]->down_until_ns =
      NowNs() + std::chrono::duration_cast<std::chrono::nanoseconds>(down_for_).count();
}

void ComputePool::MarkUp(size_t i) { nodes_[i]->down_until_ns = 0; }

absl::StatusOr<ComputeResult> ComputePool::Generate(
    uint64_t key, const ComputeRequest& request, const std::vector<expert_source::ExpertId>& hints,
    const std::function<bool(const generation::SampledToken&)>& on_token) {
  std::vector<size_t> order = Order(key);
  if (!hints.empty()) {
    // Advisory: a failed hint never fails the request.
    absl::StatusOr<size_t> hinted = node(order[0]).Prefetch(hints);
    if (!hinted.ok() && hinted.status().code() == absl::StatusCode::kUnavailable) {
      MarkDown(order[0]);
      order = Order(key);
    }
  }
  bool streamed = false;  // a token reached the caller: no failover from here on
  auto tracked = [&](const generation::SampledToken& t) {
    streamed = true;
    return on_token(t);
  };
  for (size_t attempt = 0;; ++attempt) {
    absl::StatusOr<ComputeResult> generated = node(order[attempt]).Generate(request, tracked);
    if (generated.ok()) {
      MarkUp(order[attempt]);
      return generated;
    }
    const bool unavailable = generated.status().code() == absl::StatusCode::kUnavailable;
    if (unavailable) MarkDown(order[attempt]);
    if (!unavailable || streamed || attempt + 1 >= order.size()) return generated;
  }
}

}  // namespace colibri::router
