// Forced tool calls: the grammar of one call written in a chat format's own syntax
// (colibri/tokenizer/chat_output.h), its arguments valid against the tool's parameters schema
// (json_schema.h's subset). What OpenAI's tool_choice "required" or a named function, and
// Anthropic's tool_choice "any" or "tool", constrain an answer to; the answer then parses back
// (ParseAssistantOutput) into exactly one call.
//
// Formats: Qwen3 (JSON in <tool_call>), Qwen3-Coder (<function=...><parameter=...>), GLM-4.5
// (<arg_key>/<arg_value>), DeepSeek V3.1, Kimi K2, Mistral ([TOOL_CALLS] JSON list) and gpt-oss
// harmony (to=functions.NAME ... <|call|>). In the formats that write argument values as text
// (GLM-4.5, Qwen3-Coder) a string parameter's value holds no '<'; other values are JSON.
// Reasoning is not written before a forced call.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "colibri/tokenizer/chat_output.h"

namespace colibri::grammar {

// `tools_json`: the request's tools, OpenAI shape ({"type": "function", "function": {"name",
// "parameters"}} or the function object itself). `name`: the tool to call ("": any of them).
// InvalidArgument naming the problem: no tools, no tool of that name, a parameters schema
// outside the subset (naming the tool), or a chat template with no tool-call format.
absl::StatusOr<std::string> ToolCallGrammar(tokenizer::ChatOutputFormat format,
                                            std::string_view tools_json, const std::string& name);

}  // namespace colibri::grammar
