// Parsing and validating OpenAI request bodies (untrusted JSON). Every field is type-checked;
// errors are InvalidArgument naming the field, as OpenAI's API reports them.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/tokenizer/chat.h"
#include "router_core.h"

namespace colibri::router {

struct OpenAiRequest {
  std::string model;
  bool chat = true;
  std::vector<tokenizer::ChatMessage> messages;  // chat
  std::string prompt;                            // completions (text)
  std::vector<int32_t> prompt_ids;               // completions (token ids)
  bool stream = false;
  bool include_usage = false;
  bool return_token_ids = false;        // extension: token ids in each choice
  tokenizer::ChatOptions chat_options;  // tools, chat_template_kwargs
  TextRequest params;                   // prompt left empty: filled after tokenizing
};

// `chat` selects /v1/chat/completions (messages) or /v1/completions (prompt).
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(const std::string& body, bool chat);

}  // namespace colibri::router
