#include "colibri/tokenizer/chat.h"

#include "absl/strings/str_cat.h"

namespace colibri::tokenizer {

absl::StatusOr<std::string> RenderMistralChat(const Tokenizer& tok, const std::vector<ChatMessage>& messages) {
  if (messages.empty()) return absl::InvalidArgumentError("messages: at least one message is required");
  size_t i = 0;
  std::string system;
  if (messages[0].role == "system") {
    system = messages[0].content;
    i = 1;
  }
  std::string out = tok.bos_token();
  bool expect_user = true;
  bool first_user = true;
  for (; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role != "user" && m.role != "assistant") {
      return absl::InvalidArgumentError(absl::StrCat("messages[", i, "]: role '", m.role,
                                                     "' is not supported by this model's chat format"));
    }
    if ((m.role == "user") != expect_user) {
      return absl::InvalidArgumentError(absl::StrCat("messages[", i, "]: roles must alternate user/assistant"));
    }
    if (m.role == "user") {
      std::string content = m.content;
      if (first_user && !system.empty()) content = absl::StrCat(system, "\n\n", content);
      first_user = false;
      absl::StrAppend(&out, "[INST] ", content, " [/INST]");
    } else {
      absl::StrAppend(&out, m.content, tok.eos_token());
    }
    expect_user = !expect_user;
  }
  if (expect_user) return absl::InvalidArgumentError("messages: the last message must be from the user");
  return out;
}

}  // namespace colibri::tokenizer
