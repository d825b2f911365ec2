// Chat prompts: turns OpenAI-style messages into the text the model was trained on, by
// rendering the model's own chat template (tokenizer_config.json "chat_template" or GGUF
// tokenizer.chat_template) with the Jinja interpreter (jinja.h), as transformers'
// apply_chat_template does. Thread-safe: all functions are pure.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace colibri::tokenizer {

// Nesting limit of the JSON the template sees (tools, extra context, tool calls, messages), as
// for request bodies: deeper is InvalidArgument naming the limit.
inline constexpr int kMaxChatJsonDepth = 64;

struct ChatMessage {
  std::string role;  // system | user | assistant | tool
  std::string content;
  // Optional fields; empty means absent (the template sees them undefined).
  std::string reasoning_content;  // an assistant's thinking (Qwen3 renders it in <think>)
  std::string tool_calls_json;    // assistant: JSON array of OpenAI tool calls
  std::string name;
  std::string tool_call_id;  // tool: the call this message answers
};

struct ChatOptions {
  bool add_generation_prompt = true;
  // JSON array of tool definitions (OpenAI "tools"); "" = none (the template sees None).
  std::string tools_json;
  // JSON object of extra template variables, e.g. {"enable_thinking": false}; they override
  // the defaults below.
  std::string extra_context_json;
};

// Renders the tokenizer's chat template with the variables transformers passes: messages,
// tools (None when absent), documents (None), add_generation_prompt, bos_token / eos_token
// (when the tokenizer has them) and the extra context. A ChatMessage becomes
// {"role", "content", ...optional fields}; an assistant message with tool calls and empty
// content gets content null, as OpenAI clients send it. Without a template, falls back to
// RenderMistralChat. The tokenizer's template is the one it parsed at load (never re-parsed
// per call). Errors: InvalidArgument naming the template line (raise_exception's message
// verbatim), the malformed JSON option or one nested deeper than kMaxChatJsonDepth;
// FailedPrecondition for a template outside the supported Jinja subset; ResourceExhausted when
// the template runs past its budget (jinja::Limits), e.g. "chat template: line 1: step budget
// of 10000000 exceeded".
absl::StatusOr<std::string> RenderChat(const Tokenizer& tok,
                                       const std::vector<ChatMessage>& messages,
                                       const ChatOptions& options = ChatOptions());

// As RenderChat, with the messages as a JSON array passed to the template unchanged, and with
// `chat_template` instead of the tokenizer's own when it is not empty. An empty template and
// no tokenizer template is FailedPrecondition.
absl::StatusOr<std::string> RenderChatJson(const Tokenizer& tok,
                                           const nlohmann::ordered_json& messages,
                                           const ChatOptions& options = ChatOptions(),
                                           std::string_view chat_template = "");

// Renders the conversation in the Mistral/Mixtral instruct format:
//   <s>[INST] {system}\n\n{user} [/INST]{assistant}</s>[INST] {user} [/INST]
// (a system message is folded into the first user turn, as Mistral's template does).
// Roles must alternate user/assistant after an optional system message; the last message must
// be from the user. Violations are InvalidArgument naming the message index.
absl::StatusOr<std::string> RenderMistralChat(const Tokenizer& tok,
                                              const std::vector<ChatMessage>& messages);

}  // namespace colibri::tokenizer
