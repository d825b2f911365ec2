// gpt-oss's "harmony" chat format, read back out of generated text. The prompt ends with
// `<|start|>assistant`; the model then writes one or more messages, each a header, `<|message|>`,
// a body and a terminator (`<|end|>`, or `<|return|>` / `<|call|>` which end the generation):
//   <|channel|>analysis<|message|>…reasoning…<|end|>
//   <|start|>assistant<|channel|>final<|message|>…answer…<|return|>
//   <|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city":"Paris"}<|call|>
// (the recipient `to=…` may also follow the channel name). Analysis messages are reasoning,
// messages to `functions.NAME` are tool calls, every other message (final, commentary
// preambles) is content. Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace colibri::tokenizer {

struct HarmonyToolCall {
  std::string name;       // without the "functions." namespace
  std::string arguments;  // the message body as written (JSON for "json" calls)
};

struct HarmonyOutput {
  std::string content;    // final (and commentary) messages, in order
  std::string reasoning;  // analysis messages, in order
  std::vector<HarmonyToolCall> tool_calls;
};

// True when a chat template writes harmony (it uses the <|channel|> marker).
bool IsHarmonyTemplate(std::string_view chat_template);

// Splits generated text (decoded with its special tokens) into reasoning, content and tool
// calls. Text without any harmony marker is all content; a message cut off by the token limit
// keeps what it has.
HarmonyOutput ParseHarmony(std::string_view text);

// Where the header of a tool call still being written begins (its last message is addressed to
// functions.* and not terminated yet), or npos: text from there may not be shown as content.
size_t UnfinishedHarmonyCall(std::string_view text);

}  // namespace colibri::tokenizer
