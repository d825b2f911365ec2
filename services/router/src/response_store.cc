#include "response_store.h"

#include "absl/strings/str_cat.h"

namespace colibri::router {

uint64_t StoredResponse::bytes() const {
  uint64_t n = owner.size() + response_json.size();
  for (const auto& m : conversation) {
    n += m.role.size() + m.content.size() + m.reasoning_content.size() + m.tool_calls_json.size() +
         m.name.size() + m.tool_call_id.size();
  }
  return n;
}

bool ResponseStore::Put(const std::string& id, StoredResponse r) {
  const uint64_t size = r.bytes();
  if (size > max_bytes_) return false;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = entries_.find(id); it != entries_.end()) {
    bytes_ -= it->second.response.bytes();
    lru_.erase(it->second.lru);
    entries_.erase(it);
  }
  lru_.push_front(id);
  bytes_ += size;
  entries_[id] = Entry{std::move(r), lru_.begin()};
  EvictLocked();
  return true;
}

void ResponseStore::EvictLocked() {
  while (!lru_.empty() && (entries_.size() > max_responses_ || bytes_ > max_bytes_)) {
    auto it = entries_.find(lru_.back());
    bytes_ -= it->second.response.bytes();
    entries_.erase(it);
    lru_.pop_back();
  }
}

absl::StatusOr<StoredResponse> ResponseStore::Get(const std::string& id, const std::string& owner) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.response.owner != owner) {
    return absl::NotFoundError(absl::StrCat("no response '", id,
                                            "' is stored here (unknown, deleted, evicted, "
                                            "stored with another key, or the server restarted)"));
  }
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.response;
}

absl::Status ResponseStore::Delete(const std::string& id, const std::string& owner) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.response.owner != owner) {
    return absl::NotFoundError(absl::StrCat("no response '", id, "' is stored here"));
  }
  bytes_ -= it->second.response.bytes();
  lru_.erase(it->second.lru);
  entries_.erase(it);
  return absl::OkStatus();
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

uint64_t ResponseStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace colibri::router
