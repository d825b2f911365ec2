#include "colibri/tokenizer/chat_output.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>
#include <vector>

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
  const std::string tools =
      R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"code": {"type": "string"}, "n": {"type": "integer"}}}}}])";
  const std::string text =
      "<tool_call>f\n<arg_key>code</arg_key>\n<arg_value>007</arg_value>\n"
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
  AssistantOutput cut = ParseAssistantOutput(
      "Sure.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_v", ChatOutputFormat::kGlm45);
  EXPECT_TRUE(cut.tool_calls.empty());
  EXPECT_EQ(cut.content, "Sure.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_v");
  // A key without a value, and a call without a name: kept verbatim; a good call after them parses.
  AssistantOutput bad = ParseAssistantOutput(
      "a<tool_call>f\n<arg_key>x</arg_key>\n</tool_call>b<tool_call>\n</tool_call>c<tool_call>g</"
      "tool_call>",
      ChatOutputFormat::kGlm45);
  EXPECT_EQ(bad.content,
            "a<tool_call>f\n<arg_key>x</arg_key>\n</tool_call>b<tool_call>\n</tool_call>c");
  ASSERT_EQ(bad.tool_calls.size(), 1u);
  EXPECT_EQ(bad.tool_calls[0]["function"]["name"], "g");
  EXPECT_EQ(bad.tool_calls[0]["function"]["arguments"], "{}");
  // Reasoning cut off before </think>: all reasoning, no content.
  AssistantOutput thinking =
      ParseAssistantOutput("<think>still thinking", ChatOutputFormat::kGlm45);
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
  EXPECT_EQ(
      DetectChatOutputFormat("{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}"),
      ChatOutputFormat::kPlain);
  EXPECT_EQ(DetectChatOutputFormat(""), ChatOutputFormat::kPlain);
}

// Feeds `text` in the pieces `cuts` makes and returns the sum of the deltas as a whole answer;
// `before_finish` (optional) gets what came out before Finish().
AssistantOutput Streamed(std::string_view text, ChatOutputFormat format,
                         const std::vector<size_t>& cuts, AssistantOutput* before_finish = nullptr,
                         std::string_view tools = "") {
  AssistantStream stream(format, tools);
  AssistantOutput sum;
  auto add = [&](const AssistantStream::Delta& d) {
    sum.content += d.content;
    sum.reasoning_content += d.reasoning_content;
    for (const auto& call : d.tool_calls) {
      EXPECT_EQ(call["index"], sum.tool_calls.size());
      json c = call;
      c.erase("index");
      sum.tool_calls.push_back(c);
    }
  };
  size_t at = 0;
  for (size_t cut : cuts) {
    add(stream.Push(text.substr(at, cut - at)));
    at = cut;
  }
  if (before_finish) *before_finish = sum;
  add(stream.Finish(text.substr(at)));
  EXPECT_EQ(stream.tool_calls(), sum.tool_calls.size());
  return sum;
}

void ExpectSame(const AssistantOutput& got, const AssistantOutput& want, const std::string& where) {
  EXPECT_EQ(got.content, want.content) << where;
  EXPECT_EQ(got.reasoning_content, want.reasoning_content) << where;
  EXPECT_EQ(got.tool_calls, want.tool_calls) << where;
}

// Every text, cut at every byte, and in random pieces: the deltas add up to the whole parse.
void ExpectStreamsAddUp(const std::vector<std::string>& texts, ChatOutputFormat format,
                        std::string_view tools = "") {
  std::mt19937 rng(7);
  for (const std::string& text : texts) {
    const AssistantOutput want = ParseAssistantOutput(text, format, tools);
    std::vector<size_t> every;
    for (size_t i = 1; i < text.size(); ++i) every.push_back(i);
    ExpectSame(Streamed(text, format, every, nullptr, tools), want, "byte by byte: " + text);
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<size_t> cuts;
      for (size_t i = 1; i < text.size(); ++i) {
        if (rng() % 4 == 0) cuts.push_back(i);
      }
      ExpectSame(Streamed(text, format, cuts, nullptr, tools), want, "pieces: " + text);
    }
    // And every prefix (a generation cut off anywhere by max_tokens or a stop).
    for (size_t n = 0; n <= text.size(); ++n) {
      const std::string prefix = text.substr(0, n);
      ExpectSame(Streamed(prefix, format, {}), ParseAssistantOutput(prefix, format),
                 "prefix: " + prefix);
    }
  }
}

TEST(AssistantStreamTest, GlmDeltasAddUpToTheWholeAnswer) {
  ExpectStreamsAddUp(
      {"\n<think>The user wants the weather.\nUse the tool.</think>\nLet me check."
       "\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>東京</arg_value>\n</"
       "tool_call>"
       "\n<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>7</arg_value>\n</tool_call> "
       "after",
       "a<tool_call>f\n<arg_key>x</arg_key>\n</tool_call>b<tool_call>\n</tool_call>c<tool_call>g</"
       "tool_call>",
       "Sure.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_v",
       "\n</think>Just < the answer <t", "x < y and <think> later"},
      ChatOutputFormat::kGlm45,
      R"([{"type": "function", "function": {"name": "search", "parameters": {"type": "object",
          "properties": {"query": {"type": "string"}}}}}])");
}

TEST(AssistantStreamTest, HarmonyDeltasAddUpToTheWholeAnswer) {
  ExpectStreamsAddUp({"<|channel|>analysis<|message|>User asks 2+2. Answer 4.<|end|>"
                      "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>",
                      "<|channel|>analysis<|message|>Need the weather.<|end|>"
                      "<|start|>assistant<|channel|>commentary to=functions.get_weather "
                      "<|constrain|>json<|message|>"
                      "{\"city\": \"Paris\"}<|call|>",
                      "<|channel|>commentary<|message|>Checking now.<|end|>"
                      "<|start|>assistant to=functions.lookup<|channel|>commentary "
                      "json<|message|>{\"q\":\"x\"}<|call|>"
                      "<|start|>assistant<|channel|>final<|message|>a < b",
                      "just words<|return|>"},
                     ChatOutputFormat::kHarmony);
}

TEST(AssistantStreamTest, TextStreamsBeforeTheEndAndCallsWhenComplete) {
  // GLM: reasoning and content come out as they are written; a call once it closes.
  const std::string glm =
      "<think>Step one.</think>Answer: 4<tool_call>f\n<arg_key>n</arg_key>\n"
      "<arg_value>2</arg_value>\n</tool_call>";
  const size_t in_answer = glm.find(": 4") + 3, in_call = glm.find("<arg_value>"), end = glm.size();
  AssistantOutput early;
  Streamed(glm, ChatOutputFormat::kGlm45, {in_answer}, &early);
  EXPECT_EQ(early.reasoning_content, "Step one.");
  EXPECT_EQ(early.content, "Answer: 4");
  Streamed(glm, ChatOutputFormat::kGlm45, {in_call}, &early);
  EXPECT_TRUE(early.tool_calls.empty());
  EXPECT_EQ(early.content, "Answer: 4");  // the call's text is never shown as content
  Streamed(glm, ChatOutputFormat::kGlm45, {end}, &early);
  ASSERT_EQ(early.tool_calls.size(), 1u);
  EXPECT_EQ(early.tool_calls[0]["function"]["arguments"], "{\"n\":2}");

  // Harmony: the analysis channel streams as reasoning, the final one as content; a
  // functions call is held until <|call|>.
  const std::string h =
      "<|channel|>analysis<|message|>Think<|end|><|start|>assistant to=functions.f"
      "<|channel|>commentary json<|message|>{\"a\":1}<|call|>";
  Streamed(h, ChatOutputFormat::kHarmony, {h.find("<|end|>")}, &early);
  EXPECT_EQ(early.reasoning_content, "Think");
  Streamed(h, ChatOutputFormat::kHarmony, {h.find("<|call|>")}, &early);
  EXPECT_TRUE(early.tool_calls.empty());
  EXPECT_EQ(early.content, "");
  Streamed(h, ChatOutputFormat::kHarmony, {h.size()}, &early);
  ASSERT_EQ(early.tool_calls.size(), 1u);
  EXPECT_EQ(early.tool_calls[0]["function"]["name"], "f");
  EXPECT_EQ(early.tool_calls[0]["id"], "call_0");
}

TEST(ChatOutputTest, DetectsHarmonyAndItsSpecialTokens) {
  EXPECT_EQ(DetectChatOutputFormat("{{ '<|start|>assistant<|channel|>final<|message|>' }}"),
            ChatOutputFormat::kHarmony);
  EXPECT_TRUE(DecodesSpecialTokens(ChatOutputFormat::kHarmony));
  EXPECT_FALSE(DecodesSpecialTokens(ChatOutputFormat::kGlm45));
  const AssistantOutput out = ParseAssistantOutput(
      "<|channel|>analysis<|message|>r<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.f json"
      "<|message|>{}<|call|>",
      ChatOutputFormat::kHarmony);
  EXPECT_EQ(out.reasoning_content, "r");
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0], (json{{"id", "call_0"},
                                     {"type", "function"},
                                     {"function", {{"name", "f"}, {"arguments", "{}"}}}}));
}

}  // namespace

// ---- Qwen3, Qwen3-Coder, DeepSeek, Kimi K2, Mistral ----------------------------------------

json Args(const json& call) {
  return json::parse(call["function"]["arguments"].get<std::string>());
}

TEST(ChatOutputTest, Qwen3JsonCallsAndReasoning) {
  const std::string text =
      "<think>\nNeed the weather.\n</think>\n\nChecking.\n<tool_call>\n{\"name\": \"get_weather\", "
      "\"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": "
      "\"now\", \"arguments\": \"{\\\"tz\\\": \\\"UTC\\\"}\"}\n</tool_call>";
  const AssistantOutput out = ParseAssistantOutput(text, ChatOutputFormat::kQwen3);
  EXPECT_EQ(out.reasoning_content, "Need the weather.");
  EXPECT_EQ(out.content, "Checking.");
  ASSERT_EQ(out.tool_calls.size(), 2u);
  EXPECT_EQ(out.tool_calls[0]["id"], "call_0");
  EXPECT_EQ(out.tool_calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(Args(out.tool_calls[0]), (json{{"city", "Paris"}, {"days", 2}}));
  EXPECT_EQ(Args(out.tool_calls[1]), (json{{"tz", "UTC"}}));  // arguments given as a string
  // Not JSON, no name, arguments not an object: content, as written.
  const std::string bad =
      "<tool_call>{\"name\": \"f\", </tool_call><tool_call>{\"arguments\": {}}</tool_call>"
      "<tool_call>{\"name\": \"g\", \"arguments\": [1]}</tool_call>";
  const AssistantOutput b = ParseAssistantOutput(bad, ChatOutputFormat::kQwen3);
  EXPECT_TRUE(b.tool_calls.empty());
  EXPECT_EQ(b.content, bad);
}

TEST(ChatOutputTest, Qwen3CoderXmlCallsAreTypedByTheSchema) {
  const std::string tools =
      R"([{"type": "function", "function": {"name": "write_file", "parameters": {"type": "object",
      "properties": {"path": {"type": "string"}, "content": {"type": "string"},
      "mode": {"type": "integer"}}}}}])";
  const std::string text =
      "I'll write it.\n<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/a.py\n"
      "</parameter>\n<parameter=content>\nprint(1)\n\nx = [1, 2]\n</parameter>\n"
      "<parameter=mode>\n644\n</parameter>\n</function>\n</tool_call>";
  const AssistantOutput out = ParseAssistantOutput(text, ChatOutputFormat::kQwen3Coder, tools);
  EXPECT_EQ(out.content, "I'll write it.");
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0]["function"]["name"], "write_file");
  EXPECT_EQ(Args(out.tool_calls[0]),
            (json{{"path", "src/a.py"}, {"content", "print(1)\n\nx = [1, 2]"}, {"mode", 644}}));
  // A parameter without its closing tag: the call stays content.
  const std::string cut = "<tool_call>\n<function=f>\n<parameter=x>\n1\n</function>\n</tool_call>";
  EXPECT_TRUE(ParseAssistantOutput(cut, ChatOutputFormat::kQwen3Coder).tool_calls.empty());
}

TEST(ChatOutputTest, DeepseekV31AndR1Calls) {
  const std::string v31 =
      "Let me look.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"q\": "
      "\"moe\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>open<｜tool▁sep｜>{\"id\": 3}"
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  const AssistantOutput a = ParseAssistantOutput(v31, ChatOutputFormat::kDeepseek);
  EXPECT_EQ(a.content, "Let me look.");
  ASSERT_EQ(a.tool_calls.size(), 2u);
  EXPECT_EQ(a.tool_calls[0]["function"]["name"], "search");
  EXPECT_EQ(Args(a.tool_calls[0]), (json{{"q", "moe"}}));
  EXPECT_EQ(a.tool_calls[1]["id"], "call_1");
  EXPECT_EQ(Args(a.tool_calls[1]), (json{{"id", 3}}));
  const std::string r1 =
      "<think>plan</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
      "get_weather\n```json\n{\"city\": \"Oslo\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  const AssistantOutput b = ParseAssistantOutput(r1, ChatOutputFormat::kDeepseek);
  EXPECT_EQ(b.reasoning_content, "plan");
  EXPECT_EQ(b.content, "");
  ASSERT_EQ(b.tool_calls.size(), 1u);
  EXPECT_EQ(b.tool_calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(Args(b.tool_calls[0]), (json{{"city", "Oslo"}}));
}

TEST(ChatOutputTest, KimiCallsKeepTheModelsIds) {
  const std::string text =
      "On it.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
      "<|tool_call_argument_begin|>{\"city\": \"Rome\"}<|tool_call_end|><|tool_call_begin|>"
      "functions.bash:1<|tool_call_argument_begin|>{\"cmd\": \"ls\"}<|tool_call_end|>"
      "<|tool_calls_section_end|>";
  const AssistantOutput out = ParseAssistantOutput(text, ChatOutputFormat::kKimiK2);
  EXPECT_EQ(out.content, "On it.");
  ASSERT_EQ(out.tool_calls.size(), 2u);
  EXPECT_EQ(out.tool_calls[0]["id"], "functions.get_weather:0");
  EXPECT_EQ(out.tool_calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(out.tool_calls[1]["id"], "functions.bash:1");
  EXPECT_EQ(Args(out.tool_calls[1]), (json{{"cmd", "ls"}}));
}

TEST(ChatOutputTest, MistralCallsBothForms) {
  const AssistantOutput list = ParseAssistantOutput(
      "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", "
      "\"arguments\": {}}]",
      ChatOutputFormat::kMistral);
  EXPECT_EQ(list.content, "");
  ASSERT_EQ(list.tool_calls.size(), 2u);
  EXPECT_EQ(list.tool_calls[0]["id"], "call00000");  // the template wants 9 alphanumerics
  EXPECT_EQ(list.tool_calls[1]["id"], "call00001");
  EXPECT_EQ(Args(list.tool_calls[0]), (json{{"x", 1}}));
  const AssistantOutput named = ParseAssistantOutput(
      "Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Nice\"}", ChatOutputFormat::kMistral);
  EXPECT_EQ(named.content, "Sure.");
  ASSERT_EQ(named.tool_calls.size(), 1u);
  EXPECT_EQ(Args(named.tool_calls[0]), (json{{"city", "Nice"}}));
  // Cut off inside the list: content.
  const AssistantOutput cut =
      ParseAssistantOutput("[TOOL_CALLS] [{\"name\": \"a\", \"argu", ChatOutputFormat::kMistral);
  EXPECT_TRUE(cut.tool_calls.empty());
}

TEST(AssistantStreamTest, EveryFormatsDeltasAddUpToTheWholeAnswer) {
  ExpectStreamsAddUp({"<think>r</think>\nHi.\n<tool_call>\n{\"name\": \"f\", \"arguments\": "
                      "{\"a\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"g\"}\n</tool_call>",
                      "no calls <tool_c at all", "<tool_call>{broken}</tool_call> after"},
                     ChatOutputFormat::kQwen3);
  ExpectStreamsAddUp({"x\n<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n"
                      "</tool_call>"},
                     ChatOutputFormat::kQwen3Coder);
  ExpectStreamsAddUp(
      {"A<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{}<｜tool▁call▁end｜>"
       "<｜tool▁calls▁end｜>"},
      ChatOutputFormat::kDeepseek);
  ExpectStreamsAddUp({"B<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
                      "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>"},
                     ChatOutputFormat::kKimiK2);
  ExpectStreamsAddUp({"C[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}}]", "[TOOL no"},
                     ChatOutputFormat::kMistral);
}

TEST(ChatOutputTest, DetectsEachFamilyFromItsTemplate) {
  auto read = [](const std::string& name) {
    std::ifstream f("tests/tokenizer/templates/" + name);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  };
  EXPECT_EQ(DetectChatOutputFormat(read("deepseek_r1.jinja")), ChatOutputFormat::kDeepseek);
  EXPECT_EQ(DetectChatOutputFormat(read("kimi_k2.jinja")), ChatOutputFormat::kKimiK2);
  EXPECT_EQ(DetectChatOutputFormat(read("mistral_tools.jinja")), ChatOutputFormat::kMistral);
  EXPECT_EQ(DetectChatOutputFormat("<|im_start|>assistant\n<tool_call>\n{{ tool_call | tojson }}"),
            ChatOutputFormat::kQwen3);
  EXPECT_EQ(DetectChatOutputFormat("<|im_start|><tool_call>\n<function={{ name }}>\n"
                                   "<parameter={{ k }}>"),
            ChatOutputFormat::kQwen3Coder);
  EXPECT_TRUE(DecodesSpecialTokens(ChatOutputFormat::kDeepseek));
  EXPECT_TRUE(DecodesSpecialTokens(ChatOutputFormat::kKimiK2));
  EXPECT_TRUE(DecodesSpecialTokens(ChatOutputFormat::kMistral));
  EXPECT_FALSE(DecodesSpecialTokens(ChatOutputFormat::kQwen3));
  EXPECT_TRUE(RendersObjectArguments(ChatOutputFormat::kQwen3Coder));
  EXPECT_FALSE(RendersObjectArguments(ChatOutputFormat::kQwen3));
}

}  // namespace colibri::tokenizer
