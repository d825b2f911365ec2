// The other direction of a chat template: a model's raw completion split back into the OpenAI
// assistant message fields (content, reasoning_content, tool_calls), for the formats whose
// reasoning and tool calls are plain text in the output. Thread-safe: pure functions.
//
// GLM-4.5 / 4.6 (format kGlm45): the completion of "<|assistant|>" is
//   [\n<think>REASONING</think>]\nCONTENT[\n<tool_call>NAME\n<arg_key>K</arg_key>\n
//   <arg_value>V</arg_value>\n...</tool_call>]...
// where V is a string verbatim or any other JSON value as JSON (the template's tojson). With
// thinking disabled the prompt already holds "<think></think>", so no reasoning comes back.
#pragma once

#include <string>
#include <string_view>

#include "nlohmann/json.hpp"

namespace colibri::tokenizer {

enum class ChatOutputFormat {
  kPlain,  // the whole completion is content
  kGlm45,  // <think> reasoning and <tool_call>/<arg_key>/<arg_value> calls (GLM-4.5, 4.6)
};

// The format a chat template's model writes, recognised from the template text ("<arg_key>"
// tool calls after "<|assistant|>"): kPlain when nothing is recognised.
ChatOutputFormat DetectChatOutputFormat(std::string_view chat_template);

struct AssistantOutput {
  std::string content;
  std::string reasoning_content;                            // "" = none
  nlohmann::json tool_calls = nlohmann::json::array();      // OpenAI shape; arguments as a JSON string
};

// Never fails: text that is not a complete, well-formed call (e.g. cut off by max_tokens) stays
// in content. `tools_json` (the request's OpenAI tools, "" = none) types the arguments: a
// parameter the schema declares "string" stays a string even when it reads as JSON ("3");
// others are parsed as JSON when they are JSON, else kept as strings. Tool call ids are
// "call_<index>" in output order.
AssistantOutput ParseAssistantOutput(std::string_view text, ChatOutputFormat format,
                                     std::string_view tools_json = "");

}  // namespace colibri::tokenizer
