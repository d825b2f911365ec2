// ResponseStore: the responses POST /v1/responses keeps (store: true, the API's default), so a
// later request can continue one with previous_response_id, and GET / DELETE /v1/responses/{id}
// can read or remove it.
//
// Contract
// - Bounded in count and in bytes (the JSON of each response plus its conversation); the least
//   recently used response goes first when either bound is passed. A response larger than the
//   byte bound alone is not kept (Put returns false).
// - Scoped to the API key's owner: a response is visible only to the owner that stored it (""
//   when the server has no keys). Another owner's id is NotFound, as an unknown one is.
// - Memory only: a restart forgets every response (clients then get NotFound and resend).
// - Thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/tokenizer/chat.h"

namespace colibri::router {

struct StoredResponse {
  std::string owner;
  std::string response_json;                         // the response object, as GET returns it
  std::vector<tokenizer::ChatMessage> conversation;  // its input turns and its output, in order
  uint64_t bytes() const;
};

class ResponseStore {
 public:
  ResponseStore(size_t max_responses, uint64_t max_bytes)
      : max_responses_(max_responses), max_bytes_(max_bytes) {}

  // Keeps `r` under `id` (replacing one of the same id); false when it alone exceeds the bytes.
  bool Put(const std::string& id, StoredResponse r);
  // NotFound naming the id when it is unknown, evicted, or another owner's.
  absl::StatusOr<StoredResponse> Get(const std::string& id, const std::string& owner);
  // NotFound as Get.
  absl::Status Delete(const std::string& id, const std::string& owner);

  size_t size() const;
  uint64_t bytes() const;

 private:
  struct Entry {
    StoredResponse response;
    std::list<std::string>::iterator lru;
  };
  void EvictLocked();

  const size_t max_responses_;
  const uint64_t max_bytes_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> lru_;  // most recent first
  uint64_t bytes_ = 0;
};

}  // namespace colibri::router
