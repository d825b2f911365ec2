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
  bool parallel_tool_calls = true;      // false: an answer's first tool call only
  // A forced tool call (OpenAI tool_choice "required" or a named function, Anthropic "any" or
  // "tool"): "*" for any of the tools, else the function's name; "" when not forced. The router
  // turns it into a grammar of one call in the model's own format (tool_call_grammar.h).
  std::string forced_tool;
  TextRequest params;  // prompt left empty: filled after tokenizing
};

// `chat` selects /v1/chat/completions (messages) or /v1/completions (prompt).
// Fields the routes do not know are named in `ignored` (the x-colibri-ignored-fields header);
// fields that would change the output but are not done (response_format json, forced tool
// calls, logit_bias, echo, suffix, best_of > 1) are InvalidArgument naming them.
// `unknown` (optional) gets the fields the route does not know (also in `ignored`).
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(const std::string& body, bool chat,
                                                 std::vector<std::string>* ignored = nullptr,
                                                 std::vector<std::string>* unknown = nullptr);

}  // namespace colibri::router
