// Chat prompts: turns OpenAI-style messages into the text the model was trained on.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/tokenizer/tokenizer.h"

namespace colibri::tokenizer {

struct ChatMessage {
  std::string role;     // system | user | assistant | tool
  std::string content;
};

// Renders the conversation in the Mistral/Mixtral instruct format:
//   <s>[INST] {system}\n\n{user} [/INST]{assistant}</s>[INST] {user} [/INST]
// (a system message is folded into the first user turn, as Mistral's template does).
// Roles must alternate user/assistant after an optional system message; the last message must
// be from the user. Violations are InvalidArgument naming the message index.
absl::StatusOr<std::string> RenderMistralChat(const Tokenizer& tok, const std::vector<ChatMessage>& messages);

}  // namespace colibri::tokenizer
