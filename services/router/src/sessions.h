// Router-side conversations for the gRPC session API: the messages of each session, so a client
// sends only its new message. Each turn renders the whole conversation with the chat template
// and runs it under the session's id, so compute continues from the KV it kept after the
// previous turn (prefix reuse) and prefills only the new tokens.
//
// One turn at a time per session (a second concurrent Send is FailedPrecondition); a turn that
// fails or is cancelled leaves the conversation unchanged. Beyond `max_sessions`, the session
// idle longest is forgotten. Thread-safe.
//
// Each session belongs to the API key identity that created it (`owner`, "" without keys):
// for any other owner it does not exist (Get and Send answer NotFound, Delete false).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/tokenizer/chat.h"
#include "router_core.h"

namespace colibri::router {

inline constexpr size_t kMaxSystemPromptBytes = 1 << 20;

struct SessionView {
  std::string id;
  std::vector<tokenizer::ChatMessage> messages;
  int64_t turns = 0;
};

class SessionManager {
 public:
  // `max_per_owner`: sessions one API key identity may hold (0: max_sessions). Past it the
  // owner's own idle-longest session is forgotten, never another owner's; when all of the
  // owner's are busy, Create is ResourceExhausted.
  SessionManager(RouterCore* core, size_t max_sessions, size_t max_per_owner = 0);

  // NotFound for a model that is not the router's; InvalidArgument for a system prompt over
  // kMaxSystemPromptBytes or one that alone fills the context.
  absl::StatusOr<SessionView> Create(const std::string& model, const std::string& system_prompt,
                                     const std::string& owner = "");
  absl::StatusOr<SessionView> Get(const std::string& id, const std::string& owner = "") const;
  bool Delete(const std::string& id, const std::string& owner = "");

  // Adds `message` to session `id`, runs the conversation with `request`'s sampling and stop
  // settings (its prompt and session id are set here) and, when it finishes (stop or length),
  // adds the answer as an assistant message.
  absl::StatusOr<TextResult> Send(const std::string& id, tokenizer::ChatMessage message,
                                  TextRequest request,
                                  const std::function<bool(const Delta&)>& on_delta,
                                  const std::string& owner = "");

  size_t size() const;

 private:
  struct Session {
    std::string id;
    std::string owner;  // API key identity that created it
    std::vector<tokenizer::ChatMessage> messages;
    int64_t turns = 0;
    bool busy = false;
    std::list<std::string>::iterator lru;  // position in lru_
  };
  void TouchLocked(Session* s);
  // The session `id` of `owner`, or nullptr (absent, or another owner's).
  Session* FindLocked(const std::string& id, const std::string& owner) const;

  RouterCore* const core_;
  const size_t max_sessions_;
  const size_t max_per_owner_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<Session>> sessions_;
  std::list<std::string> lru_;  // front = most recently used
};

}  // namespace colibri::router
