#include "colibri/tokenizer/harmony.h"

#include <gtest/gtest.h>

namespace colibri::tokenizer {
namespace {

TEST(HarmonyTest, ReasoningThenFinalAnswer) {
  const HarmonyOutput out = ParseHarmony(
      "<|channel|>analysis<|message|>User asks 2+2. Answer 4.<|end|>"
      "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>");
  EXPECT_EQ(out.reasoning, "User asks 2+2. Answer 4.");
  EXPECT_EQ(out.content, "2 + 2 = 4.");
  EXPECT_TRUE(out.tool_calls.empty());
}

TEST(HarmonyTest, ToolCallWithRecipientAfterTheChannel) {
  const HarmonyOutput out = ParseHarmony(
      "<|channel|>analysis<|message|>Need the weather.<|end|>"
      "<|start|>assistant<|channel|>commentary to=functions.get_weather "
      "<|constrain|>json<|message|>"
      "{\"city\": \"Paris\"}<|call|>");
  EXPECT_EQ(out.reasoning, "Need the weather.");
  EXPECT_EQ(out.content, "");
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].name, "get_weather");
  EXPECT_EQ(out.tool_calls[0].arguments, "{\"city\": \"Paris\"}");
}

TEST(HarmonyTest, ToolCallWithRecipientInTheHeader) {
  // The form the chat template renders for earlier tool calls.
  const HarmonyOutput out = ParseHarmony(
      " to=functions.lookup<|channel|>commentary json<|message|>{\"q\":\"x\"}<|call|>");
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].name, "lookup");
  EXPECT_EQ(out.tool_calls[0].arguments, "{\"q\":\"x\"}");
}

TEST(HarmonyTest, CommentaryPreambleIsContentAndCutOffMessageKeepsItsText) {
  const HarmonyOutput out = ParseHarmony(
      "<|channel|>commentary<|message|>Checking now.<|end|>"
      "<|start|>assistant<|channel|>analysis<|message|>thinking that was cut");
  EXPECT_EQ(out.content, "Checking now.");
  EXPECT_EQ(out.reasoning, "thinking that was cut");
}

TEST(HarmonyTest, PlainTextIsContent) {
  EXPECT_EQ(ParseHarmony("just words").content, "just words");
  EXPECT_EQ(ParseHarmony("just words<|return|>").content, "just words");
  EXPECT_EQ(ParseHarmony("").content, "");
}

TEST(HarmonyTest, RecognisesHarmonyTemplates) {
  EXPECT_TRUE(IsHarmonyTemplate("{{ '<|start|>assistant<|channel|>final<|message|>' }}"));
  EXPECT_FALSE(IsHarmonyTemplate("{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}"));
}

}  // namespace
}  // namespace colibri::tokenizer
