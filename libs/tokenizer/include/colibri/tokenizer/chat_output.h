// The other direction of a chat template: a model's raw completion split back into the OpenAI
// assistant message fields (content, reasoning_content, tool_calls), for the formats whose
// reasoning and tool calls are plain text in the output. Thread-safe: pure functions.
//
// GLM-4.5 / 4.6 (format kGlm45): the completion of "<|assistant|>" is
//   [\n<think>REASONING</think>]\nCONTENT[\n<tool_call>NAME\n<arg_key>K</arg_key>\n
//   <arg_value>V</arg_value>\n...</tool_call>]...
// where V is a string verbatim or any other JSON value as JSON (the template's tojson). With
// thinking disabled the prompt already holds "<think></think>", so no reasoning comes back.
//
// gpt-oss (format kHarmony): harmony messages (harmony.h), read from text decoded WITH its special
// tokens (DecodesSpecialTokens).
//
// Streamed answers go through AssistantStream, whose deltas add up to ParseAssistantOutput's
// result for the whole text.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "nlohmann/json.hpp"

namespace colibri::tokenizer {

enum class ChatOutputFormat {
  kPlain,       // the whole completion is content
  kGlm45,       // <think> reasoning and <tool_call>/<arg_key>/<arg_value> calls (GLM-4.5, 4.6)
  kHarmony,     // gpt-oss's channels: analysis = reasoning, to=functions.NAME = tool calls
  kQwen3,       // <think>; <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Qwen3, 2.5)
  kQwen3Coder,  // <tool_call><function=NAME><parameter=K>V</parameter></function></tool_call>
  kDeepseek,  // <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}
              // <｜tool▁call▁end｜>...<｜tool▁calls▁end｜> (V3.1), or R1 / V3's
              // function<｜tool▁sep｜>NAME + a ```json block
  kKimiK2,    // <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:I
              // <|tool_call_argument_begin|>{...}<|tool_call_end|>...; ids are the model's
  kMistral,   // [TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...] to the end, or
              // [TOOL_CALLS]NAME[ARGS]{...}; ids of 9 alphanumerics ("call00000")
};

// The format a chat template's model writes, recognised from the markers its template renders
// tool calls with: kPlain when nothing is recognised.
ChatOutputFormat DetectChatOutputFormat(std::string_view chat_template);

// True when the format's markers are special tokens, so the completion must be decoded with
// them (skip_special = false) before it is parsed.
bool DecodesSpecialTokens(ChatOutputFormat format);

// True when the format's template iterates a call's arguments as a mapping (GLM-4.5,
// Qwen3-Coder): calls sent back in a conversation are rendered with object arguments.
bool RendersObjectArguments(ChatOutputFormat format);

struct AssistantOutput {
  std::string content;
  std::string reasoning_content;                        // "" = none
  nlohmann::json tool_calls = nlohmann::json::array();  // OpenAI shape; arguments as a JSON string
};

// Never fails: text that is not a complete, well-formed call (e.g. cut off by max_tokens) stays
// in content. Reasoning is read from a leading <think>...</think> in every format but kPlain. `tools_json` (the request's OpenAI tools, "" = none) types the arguments: a
// parameter the schema declares "string" stays a string even when it reads as JSON ("3");
// others are parsed as JSON when they are JSON, else kept as strings. Tool call ids are
// "call_<index>" in output order.
AssistantOutput ParseAssistantOutput(std::string_view text, ChatOutputFormat format,
                                     std::string_view tools_json = "");

// The same split while the completion is generated. Push() takes the next piece of text and
// returns what became certain: content and reasoning are emitted as soon as no later text can
// move them (a marker that may still be forming is held back, e.g. a trailing "<tool_c"), a tool
// call once it is complete (whole, with its id and arguments). Finish() flushes the rest as
// ParseAssistantOutput reads the whole text, so the concatenated deltas always equal its result.
// Harmony text before the first <|message|> is held (the model's own header comes first).
class AssistantStream {
 public:
  struct Delta {
    std::string content;
    std::string reasoning_content;
    nlohmann::json tool_calls = nlohmann::json::array();  // new calls, OpenAI shape plus "index"
    bool empty() const {
      return content.empty() && reasoning_content.empty() && tool_calls.empty();
    }
  };

  AssistantStream(ChatOutputFormat format, std::string_view tools_json = "");
  Delta Push(std::string_view text);
  Delta Finish(std::string_view last = {});  // `last`: the text's final piece, if any
  // Calls emitted so far (a stream that had any ends with finish_reason "tool_calls").
  size_t tool_calls() const { return calls_; }

 private:
  Delta Advance(size_t stable);

  ChatOutputFormat format_;
  nlohmann::json tools_;  // the request's tools, parsed once
  std::string text_;
  std::string content_, reasoning_;  // emitted so far
  size_t calls_ = 0;
};

}  // namespace colibri::tokenizer
