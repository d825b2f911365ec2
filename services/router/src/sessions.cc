#include "sessions.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "colibri/core/checksum.h"
#include "colibri/core/status.h"

namespace colibri::router {
namespace {

std::string NewSessionId() {
  static std::mutex mu;
  static std::random_device rd;
  std::lock_guard<std::mutex> lock(mu);
  const uint64_t a = (static_cast<uint64_t>(rd()) << 32) | rd();
  const uint64_t b = (static_cast<uint64_t>(rd()) << 32) | rd();
  return absl::StrCat("sess-", ChecksumHex(a), ChecksumHex(b));
}

}  // namespace

SessionManager::SessionManager(RouterCore* core, size_t max_sessions, size_t max_per_owner)
    : core_(core),
      max_sessions_(std::max<size_t>(1, max_sessions)),
      max_per_owner_(max_per_owner == 0 ? std::max<size_t>(1, max_sessions) : max_per_owner) {}

void SessionManager::TouchLocked(Session* s) { lru_.splice(lru_.begin(), lru_, s->lru); }

SessionManager::Session* SessionManager::FindLocked(const std::string& id,
                                                    const std::string& owner) const {
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second->owner != owner) return nullptr;
  return it->second.get();
}

absl::StatusOr<SessionView> SessionManager::Create(const std::string& model,
                                                   const std::string& system_prompt,
                                                   const std::string& owner) {
  RETURN_IF_ERROR(core_->CheckModel(model));
  // A system prompt the context cannot hold would only make every turn fail: refused here,
  // cheaply by size first, then by its tokens.
  if (system_prompt.size() > kMaxSystemPromptBytes) {
    return absl::InvalidArgumentError(absl::StrCat("system prompt of ", system_prompt.size(),
                                                   " bytes is over the limit of ",
                                                   kMaxSystemPromptBytes));
  }
  if (!system_prompt.empty()) {
    ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                     core_->EncodeText(system_prompt));  // what any template adds to
    if (static_cast<int64_t>(ids.size()) >= core_->context_length()) {
      return absl::InvalidArgumentError(absl::StrCat("system prompt of ", ids.size(),
                                                     " tokens leaves no room in the context of ",
                                                     core_->context_length()));
    }
  }
  auto s = std::make_unique<Session>();
  s->id = NewSessionId();
  s->owner = owner;
  if (!system_prompt.empty()) s->messages.push_back({"system", system_prompt});
  std::lock_guard<std::mutex> lock(mu_);
  // One key cannot crowd the others out: past its quota it loses its own idle-longest session.
  size_t owned = 0;
  for (const auto& [id, other] : sessions_) owned += other->owner == owner;
  if (owned >= max_per_owner_) {
    bool freed = false;
    for (auto it = lru_.end(); it != lru_.begin() && !freed;) {
      --it;
      auto found = sessions_.find(*it);
      if (found != sessions_.end() && found->second->owner == owner && !found->second->busy) {
        sessions_.erase(found);
        lru_.erase(it);
        freed = true;
      }
    }
    if (!freed) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "this key holds ", owned, " sessions, all answering now (limit ", max_per_owner_, ")"));
    }
  }
  // Forget the sessions idle longest (never one being answered).
  for (auto it = lru_.end(); sessions_.size() >= max_sessions_ && it != lru_.begin();) {
    --it;
    auto found = sessions_.find(*it);
    if (found != sessions_.end() && !found->second->busy) {
      sessions_.erase(found);
      it = lru_.erase(it);
    }
  }
  lru_.push_front(s->id);
  s->lru = lru_.begin();
  SessionView view{s->id, s->messages, 0};
  sessions_.emplace(s->id, std::move(s));
  return view;
}

absl::StatusOr<SessionView> SessionManager::Get(const std::string& id,
                                                const std::string& owner) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Session* s = FindLocked(id, owner);
  if (s == nullptr) return absl::NotFoundError(absl::StrCat("no session '", id, "'"));
  return SessionView{s->id, s->messages, s->turns};
}

bool SessionManager::Delete(const std::string& id, const std::string& owner) {
  std::lock_guard<std::mutex> lock(mu_);
  Session* s = FindLocked(id, owner);
  if (s == nullptr) return false;
  lru_.erase(s->lru);
  sessions_.erase(id);
  return true;
}

size_t SessionManager::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sessions_.size();
}

absl::StatusOr<TextResult> SessionManager::Send(const std::string& id,
                                                tokenizer::ChatMessage message, TextRequest request,
                                                const std::function<bool(const Delta&)>& on_delta,
                                                const std::string& owner) {
  if (message.role.empty()) message.role = "user";
  std::vector<tokenizer::ChatMessage> conversation;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Session* s = FindLocked(id, owner);
    if (s == nullptr) return absl::NotFoundError(absl::StrCat("no session '", id, "'"));
    if (s->busy) {
      return absl::FailedPreconditionError(
          absl::StrCat("session '", id, "' is still answering its previous message"));
    }
    s->busy = true;
    TouchLocked(s);
    conversation = s->messages;
  }
  conversation.push_back(message);
  absl::StatusOr<TextResult> result;
  if (auto ids = core_->EncodeChat(conversation); ids.ok()) {
    request.prompt = std::move(*ids);
    request.session_id = id;
    result = core_->Run(request, on_delta);
  } else {
    result = ids.status();
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return result;  // deleted while answering: nothing to keep
  Session* s = it->second.get();
  s->busy = false;
  if (result.ok() && result->finish != generation::FinishReason::kCancelled) {
    s->messages.push_back(std::move(message));
    s->messages.push_back({"assistant", result->text});
    s->turns++;
  }
  return result;
}

}  // namespace colibri::router
