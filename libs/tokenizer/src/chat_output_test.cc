#include "colibri/tokenizer/chat_output.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace colibri::tokenizer {
namespace {

using nlohmann::json;

TEST(ChatOutputTest, GlmReasoningContentAndToolCalls) {
  const std::string text =
      "\n<think>The user wants the weather.\nUse the tool.</think>\nLet me check."
      "\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>東京</arg_value>\n"
      "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n<arg_key>opts</arg_key>\n"
      "<arg_value>{\"metric\": true}</arg_value>\n</tool_call>"
      "\n<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>news</arg_value>\n</tool_call>";
  const AssistantOutput out = ParseAssistantOutput(text, ChatOutputFormat::kGlm45);
  EXPECT_EQ(out.reasoning_content, "The user wants the weather.\nUse the tool.");
  EXPECT_EQ(out.content, "Let me check.");
  ASSERT_EQ(out.tool_calls.size(), 2u);
  EXPECT_EQ(out.tool_calls[0]["id"], "call_0");
  EXPECT_EQ(out.tool_calls[0]["type"], "function");
  EXPECT_EQ(out.tool_calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(out.tool_calls[0]["function"]["arguments"].get<std::string>()),
            (json{{"city", "東京"}, {"days", 3}, {"opts", {{"metric", true}}}}));
  EXPECT_EQ(out.tool_calls[1]["id"], "call_1");
  EXPECT_EQ(out.tool_calls[1]["function"]["arguments"], "{\"query\":\"news\"}");
}

TEST(ChatOutputTest, GlmStringParametersStayStringsWhenTheToolSaysSo) {
  const std::string tools = R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"code": {"type": "string"}, "n": {"type": "integer"}}}}}])";
  const std::string text = "<tool_call>f\n<arg_key>code</arg_key>\n<arg_value>007</arg_value>\n"
                           "<arg_key>n</arg_key>\n<arg_value>7</arg_value>\n</tool_call>";
  const AssistantOutput typed = ParseAssistantOutput(text, ChatOutputFormat::kGlm45, tools);
  ASSERT_EQ(typed.tool_calls.size(), 1u);
  EXPECT_EQ(json::parse(typed.tool_calls[0]["function"]["arguments"].get<std::string>()),
            (json{{"code", "007"}, {"n", 7}}));
  EXPECT_EQ(typed.content, "");
  // Without the schema, "007" is not JSON and stays a string; "7" becomes a number.
  const AssistantOutput untyped = ParseAssistantOutput(text, ChatOutputFormat::kGlm45);
  EXPECT_EQ(json::parse(untyped.tool_calls[0]["function"]["arguments"].get<std::string>()),
            (json{{"code", "007"}, {"n", 7}}));
}

TEST(ChatOutputTest, GlmMalformedOrCutOffCallsStayContent) {
  // Cut off by max_tokens inside the call: no closing tag, all of it is content.
  AssistantOutput cut = ParseAssistantOutput("Sure.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_v",
                                             ChatOutputFormat::kGlm45);
  EXPECT_TRUE(cut.tool_calls.empty());
  EXPECT_EQ(cut.content, "Sure.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_v");
  // A key without a value, and a call without a name: kept verbatim; a good call after them parses.
  AssistantOutput bad = ParseAssistantOutput(
      "a<tool_call>f\n<arg_key>x</arg_key>\n</tool_call>b<tool_call>\n</tool_call>c<tool_call>g</tool_call>",
      ChatOutputFormat::kGlm45);
  EXPECT_EQ(bad.content, "a<tool_call>f\n<arg_key>x</arg_key>\n</tool_call>b<tool_call>\n</tool_call>c");
  ASSERT_EQ(bad.tool_calls.size(), 1u);
  EXPECT_EQ(bad.tool_calls[0]["function"]["name"], "g");
  EXPECT_EQ(bad.tool_calls[0]["function"]["arguments"], "{}");
  // Reasoning cut off before </think>: all reasoning, no content.
  AssistantOutput thinking = ParseAssistantOutput("<think>still thinking", ChatOutputFormat::kGlm45);
  EXPECT_EQ(thinking.reasoning_content, "still thinking");
  EXPECT_EQ(thinking.content, "");
}

TEST(ChatOutputTest, GlmWithoutThinkingAndPlainFormat) {
  AssistantOutput glm = ParseAssistantOutput("\nJust the answer.", ChatOutputFormat::kGlm45);
  EXPECT_EQ(glm.content, "Just the answer.");
  EXPECT_EQ(glm.reasoning_content, "");
  EXPECT_TRUE(glm.tool_calls.empty());
  const std::string raw = "<think>x</think> <tool_call>f</tool_call>";
  AssistantOutput plain = ParseAssistantOutput(raw, ChatOutputFormat::kPlain);
  EXPECT_EQ(plain.content, raw);
  EXPECT_TRUE(plain.tool_calls.empty());
}

TEST(ChatOutputTest, DetectsGlmFromItsTemplate) {
  // ctest runs in the source tree.
  std::ifstream f("tests/tokenizer/templates/glm4_5.jinja");
  ASSERT_TRUE(f.good()) << "run from the repository root";
  std::stringstream s;
  s << f.rdbuf();
  EXPECT_EQ(DetectChatOutputFormat(s.str()), ChatOutputFormat::kGlm45);
  EXPECT_EQ(DetectChatOutputFormat("{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}"),
            ChatOutputFormat::kPlain);
  EXPECT_EQ(DetectChatOutputFormat(""), ChatOutputFormat::kPlain);
}

}  // namespace
}  // namespace colibri::tokenizer
